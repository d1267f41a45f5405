package docstest

import (
	"bufio"
	"go/version"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// codeNeeds is the lowest release whose language and standard library the
// code itself uses (testing/synctest is 1.25's): below what its
// dependencies ask, so they decide the go directive.
const codeNeeds = "1.25.0"

// TestGoDirective: every module's go directive is the lowest release it
// needs, the highest of codeNeeds and the go directives of the modules its
// packages and tests import, so that no earlier patch release of that Go
// is made to download a toolchain.
func TestGoDirective(t *testing.T) {
	top := root(t)
	var mods []string
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != top && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			mods = append(mods, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range mods {
		rel, _ := filepath.Rel(top, dir)
		t.Run(rel, func(t *testing.T) {
			directive := goDirective(t, filepath.Join(dir, "go.mod"))
			cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "-test",
				"-f", "{{with .Module}}{{.Path}} {{.GoVersion}}{{end}}", "./...")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOWORK=off")
			out, err := cmd.Output()
			if err != nil {
				if rel != "." {
					// The side modules' dependencies are downloaded by
					// their own tests (bench's by make bench).
					t.Skipf("its dependencies are not in the module cache: %v", err)
				}
				t.Fatalf("go list: %v", err)
			}
			want, by := codeNeeds, "the code itself"
			for line := range strings.Lines(string(out)) {
				path, v, _ := strings.Cut(strings.TrimSpace(line), " ")
				if v == "" || strings.HasPrefix(path, "github.com/floodgate-rl/floodgate") {
					continue
				}
				if version.Compare("go"+v, "go"+want) > 0 {
					want, by = v, path
				}
			}
			if directive != want {
				t.Errorf("go.mod says go %s; the lowest release it needs is %s (asked by %s)", directive, want, by)
			}
		})
	}
}

// goDirective returns the version of the go directive of the go.mod file
// at path.
func goDirective(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no go directive", path)
	return ""
}
