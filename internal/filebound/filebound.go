// Package filebound reads the files floodgate is configured with (config,
// tokens, certificates and keys, CAs, Envoy rule files) as regular files of
// a bounded size, so that a path naming a device (/dev/zero), a pipe or a
// file that never ends is an error at once rather than a process that
// grows without bound or waits forever.
package filebound

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// The bounds of each kind of file.
const (
	// MaxConfig bounds a config file.
	MaxConfig = 4 << 20
	// MaxTokens bounds a tokens file.
	MaxTokens = 1 << 20
	// MaxPEM bounds a certificate, key or CA file.
	MaxPEM = 1 << 20
	// MaxRules bounds one Envoy rule file.
	MaxRules = 4 << 20
)

// ErrNotRegular is the error of a path that is not a regular file (a
// folder, a device, a pipe, a socket); a symbolic link to a regular file
// is read.
var ErrNotRegular = errors.New("is not a regular file")

// Read returns the contents of the regular file at path, at most max
// bytes. Its errors leave the path out, for the caller to name it with
// the setting that gave it: "no such file or directory", "is not a
// regular file (a character device)", "is over 1048576 bytes".
func Read(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if err := regular(fi, max); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil { // what was opened, if the path changed since
		return nil, unwrapPath(err)
	}
	if err := regular(fi, max); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if int64(len(data)) > max { // it grew as it was read
		return nil, fmt.Errorf("is over %d bytes", max)
	}
	return data, nil
}

// regular checks that fi is a regular file of at most max bytes.
func regular(fi fs.FileInfo, max int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > max {
		return fmt.Errorf("is %d bytes, over the %d bytes such a file may be", fi.Size(), max)
	}
	return nil
}

// kind names the type of a file that is not regular.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}

// unwrapPath drops the path from an *fs.PathError.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
