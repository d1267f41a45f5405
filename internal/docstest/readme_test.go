package docstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestReadmeLibraryExample compiles the README's library example as a
// program of its own (a module that requires floodgate from this
// checkout), runs it, and compares what it prints with what the README
// says it prints.
func TestReadmeLibraryExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	readme := readDoc(t, "README.md")
	src := taggedBlock(t, readme, "README.md", "library example")
	want := taggedBlock(t, readme, "README.md", "library output")
	out, err := exec.Command(buildProgram(t, src)).Output()
	if err != nil {
		t.Fatalf("the README's example does not run: %v\n%s", err, stderrOf(err))
	}
	if string(out) != want {
		t.Fatalf("the README's example prints\n%s\nthe README says\n%s", out, want)
	}
}

// buildProgram builds src, a document's main package, as a module of its
// own that requires floodgate from this checkout, and returns the
// binary's path. Everything comes from the checkout and the module cache:
// no network.
func buildProgram(t *testing.T, src string) string {
	t.Helper()
	repo, err := filepath.Abs(root(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := "module docexample\n\ngo 1.26\n\nrequire github.com/floodgate-rl/floodgate v0.0.0\n\nreplace github.com/floodgate-rl/floodgate => " + repo + "\n"
	for name, data := range map[string]string{"go.mod": mod, "go.sum": string(sum), "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "example")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the document's program does not build: %v\n%s", err, out)
	}
	return bin
}

// stderrOf returns what a program that err ended wrote to its standard
// error, when cmd.Output kept it.
func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
