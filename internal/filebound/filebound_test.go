package filebound_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/filebound"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		want       string // the data, or a part of the error after "!"
	}{
		{"a regular file", small, "hello"},
		{"a link to one", link, "hello"},
		{"over the bound", big, "!is 2048 bytes, over the 1024 bytes"},
		{"a device that never ends", "/dev/zero", "!is not a regular file (a character device)"},
		{"a named pipe, which would block", fifo, "!is not a regular file (a named pipe)"},
		{"a folder", dir, "!is not a regular file (a folder)"},
		{"missing", filepath.Join(dir, "none"), "!no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, err := filebound.Read(c.path, 1024)
			if want, isErr := strings.CutPrefix(c.want, "!"); isErr {
				if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), c.path) {
					t.Fatalf("error %v, want one with %q and without the path", err, want)
				}
				return
			}
			if err != nil || string(data) != c.want {
				t.Fatalf("%q %v", data, err)
			}
		})
	}
}
