package docstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// roomsDoc is the document whose table the packages' imports must follow.
const roomsDoc = "docs/ARCHITECTURE.md"

// roomsHeading opens the rooms table's section in roomsDoc.
const roomsHeading = "### Rooms and what they may import"

// room is one row of the rooms table.
type room struct {
	name     string
	pkgs     []string    // import paths
	allow    []allowance // what its packages may import (beyond the standard library)
	anything bool        // "anything": every import but the rooms in except
	except   []string    // room names
}

// allowance is one entry of a room's "may import": a room's name, a
// package of the module (its path inside the module, or "floodgate" for the
// root) or an outside module's import path (which allows its packages too),
// optionally only for some of the room's packages.
type allowance struct {
	token string
	only  []string // import paths; empty: every package of the room
}

// roomPackage is what the check needs of one package.
type roomPackage struct {
	path    string   // import path
	imports []string // of its non-test files
}

var (
	backticked = regexp.MustCompile("^`([^`]+)`")
	onlyClause = regexp.MustCompile("^\\s*\\(only ((?:`[^`]+`(?:,\\s*)?)+)\\)")
	ticks      = regexp.MustCompile("`([^`]+)`")
)

// parseRooms reads the rooms table of an ARCHITECTURE.md-shaped document
// for the module named module. Every cell of "may import" must parse:
// the table is a rule the test reads, not prose.
func parseRooms(doc, module string) ([]room, error) {
	i := strings.Index(doc, roomsHeading)
	if i < 0 {
		return nil, fmt.Errorf("no %q section", roomsHeading)
	}
	var rooms []room
	inTable := false
	for n, line := range strings.Split(doc[i:], "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if len(cells) < 3 {
			return nil, fmt.Errorf("rooms table line %d: %d cells, want room | packages | may import | ...", n, len(cells))
		}
		if cells[0] == "room" || strings.HasPrefix(cells[0], "---") {
			continue // the header and its rule
		}
		r := room{name: cells[0]}
		for _, m := range ticks.FindAllStringSubmatch(cells[1], -1) {
			r.pkgs = append(r.pkgs, modulePath(module, m[1]))
		}
		if len(r.pkgs) == 0 {
			return nil, fmt.Errorf("rooms table: room %q lists no package", r.name)
		}
		if err := r.parseAllowed(cells[2], module); err != nil {
			return nil, fmt.Errorf("rooms table: room %q: may import %q: %w", r.name, cells[2], err)
		}
		rooms = append(rooms, r)
	}
	if len(rooms) == 0 {
		return nil, errors.New("the rooms table has no rows")
	}
	return rooms, nil
}

// parseAllowed reads a "may import" cell: "nothing", "anything",
// "anything but `room`, ...", or "`x`, `y` (only `p`, `q`), ...".
func (r *room) parseAllowed(cell, module string) error {
	switch {
	case cell == "nothing":
		return nil
	case cell == "anything":
		r.anything = true
		return nil
	case strings.HasPrefix(cell, "anything but "):
		r.anything = true
		for _, m := range ticks.FindAllStringSubmatch(cell, -1) {
			r.except = append(r.except, m[1])
		}
		return nil
	}
	rest := cell
	for {
		m := backticked.FindStringSubmatch(rest)
		if m == nil {
			return fmt.Errorf("expected a `name` at %q", rest)
		}
		a := allowance{token: m[1]}
		rest = rest[len(m[0]):]
		if o := onlyClause.FindStringSubmatch(rest); o != nil {
			for _, p := range ticks.FindAllStringSubmatch(o[1], -1) {
				a.only = append(a.only, modulePath(module, p[1]))
			}
			rest = rest[len(o[0]):]
		}
		r.allow = append(r.allow, a)
		rest = strings.TrimSpace(rest)
		if rest == "" {
			return nil
		}
		if !strings.HasPrefix(rest, ",") {
			return fmt.Errorf("expected a comma at %q", rest)
		}
		rest = strings.TrimSpace(rest[1:])
	}
}

// modulePath is the import path of a package the table names by its path
// in the module ("floodgate" is the root).
func modulePath(module, name string) string {
	name = strings.TrimSuffix(name, "/")
	if name == "floodgate" || name == "." {
		return module
	}
	return module + "/" + name
}

// external reports whether a "may import" token names an outside module.
func external(tok string) bool {
	first, _, _ := strings.Cut(tok, "/")
	return strings.Contains(first, ".")
}

// standard reports whether an import path is the standard library's.
func standard(path, module string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") && path != module && !strings.HasPrefix(path, module+"/")
}

// checkRooms returns every way pkgs break rooms: a package in no room (or
// in two), a table entry naming nothing, an import its room does not allow.
func checkRooms(rooms []room, pkgs []roomPackage, module string) []string {
	var problems []string
	short := func(p string) string {
		if p == module {
			return "floodgate (root)"
		}
		return strings.TrimPrefix(p, module+"/")
	}
	exists := make(map[string]bool, len(pkgs))
	for _, p := range pkgs {
		exists[p.path] = true
	}
	byName := make(map[string]*room, len(rooms))
	roomOf := make(map[string]*room)
	for i := range rooms {
		r := &rooms[i]
		if byName[r.name] != nil {
			problems = append(problems, fmt.Sprintf("rooms table: room %q is listed twice", r.name))
		}
		byName[r.name] = r
		for _, p := range r.pkgs {
			if !exists[p] {
				problems = append(problems, fmt.Sprintf("rooms table: room %q lists %s, which is no package of the module", r.name, short(p)))
			}
			if o := roomOf[p]; o != nil {
				problems = append(problems, fmt.Sprintf("rooms table: package %s is in two rooms, %q and %q", short(p), o.name, r.name))
			}
			roomOf[p] = r
		}
	}
	for _, r := range rooms {
		for _, e := range r.except {
			if byName[e] == nil {
				problems = append(problems, fmt.Sprintf("rooms table: room %q: %q is no room", r.name, e))
			}
		}
		for _, a := range r.allow {
			if byName[a.token] == nil && !external(a.token) && !exists[modulePath(module, a.token)] {
				problems = append(problems, fmt.Sprintf("rooms table: room %q may import %q, which is no room and no package", r.name, a.token))
			}
			for _, o := range a.only {
				if !slices.Contains(r.pkgs, o) {
					problems = append(problems, fmt.Sprintf("rooms table: room %q: %q (only %s): %s is not in the room", r.name, a.token, short(o), short(o)))
				}
			}
		}
	}
	allowed := func(r *room, pkg, imp string) bool {
		if r.anything {
			for _, e := range r.except {
				if er := byName[e]; er != nil && slices.Contains(er.pkgs, imp) {
					return false
				}
			}
			return true
		}
		for _, a := range r.allow {
			if len(a.only) > 0 && !slices.Contains(a.only, pkg) {
				continue
			}
			switch ar := byName[a.token]; {
			case ar != nil:
				if slices.Contains(ar.pkgs, imp) {
					return true
				}
			case external(a.token):
				if imp == a.token || strings.HasPrefix(imp, a.token+"/") {
					return true
				}
			case imp == modulePath(module, a.token):
				return true
			}
		}
		return false
	}
	for _, p := range pkgs {
		r := roomOf[p.path]
		if r == nil {
			problems = append(problems, fmt.Sprintf("package %s is in no room of %s's rooms table", short(p.path), roomsDoc))
			continue
		}
		for _, imp := range p.imports {
			if !standard(imp, module) && !allowed(r, p.path, imp) {
				problems = append(problems, fmt.Sprintf("package %s (%s room) imports %s, which the rooms table of %s does not allow",
					short(p.path), r.name, short(imp), roomsDoc))
			}
		}
	}
	return problems
}

// listPackages runs go list on the module at dir and reads each package's
// non-test imports.
func listPackages(t *testing.T, dir string) (module string, pkgs []roomPackage) {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-json", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Module     struct{ Path string }
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		module = p.Module.Path
		pkgs = append(pkgs, roomPackage{path: p.ImportPath, imports: p.Imports})
	}
	return module, pkgs
}

// TestRooms: every package of the module is in one room of
// docs/ARCHITECTURE.md's table and imports (outside its tests) only what
// its room allows.
func TestRooms(t *testing.T) {
	top := root(t)
	module, pkgs := listPackages(t, top)
	if len(pkgs) < 20 || module == "" {
		t.Fatalf("go list found %d packages of module %q: too few to be this repository", len(pkgs), module)
	}
	rooms, err := parseRooms(readDoc(t, roomsDoc), module)
	if err != nil {
		t.Fatalf("%s: %v", roomsDoc, err)
	}
	for _, p := range checkRooms(rooms, pkgs, module) {
		t.Error(p)
	}
}

// TestCheckRooms holds the checker to what it must catch, on a small table.
func TestCheckRooms(t *testing.T) {
	const mod = "example.com/m"
	const table = roomsHeading + "\n\n" +
		"| room | packages | may import | why |\n" +
		"|---|---|---|---|\n" +
		"| core | `floodgate` (root) | nothing | |\n" +
		"| store | `mem`, `red` | `core`, `github.com/redis/rueidis` (only `red`) | |\n" +
		"| helper | `internal/h` | `core`, `go.yaml.in/yaml/v3` | |\n" +
		"| adapter | `front` | `core`, `internal/h` | |\n" +
		"| test helper | `internal/th` | `core`, `helper` | |\n" +
		"| program | `cmd/x` | anything but `test helper` | |\n" +
		"\nAfter the table.\n"
	good := func() []roomPackage {
		return []roomPackage{
			{path: mod, imports: []string{"fmt"}},
			{path: mod + "/mem", imports: []string{mod, "sync"}},
			{path: mod + "/red", imports: []string{mod, "github.com/redis/rueidis", "github.com/redis/rueidis/rueidiscompat"}},
			{path: mod + "/internal/h", imports: []string{"go.yaml.in/yaml/v3"}},
			{path: mod + "/front", imports: []string{mod, mod + "/internal/h"}},
			{path: mod + "/internal/th", imports: []string{mod + "/internal/h"}},
			{path: mod + "/cmd/x", imports: []string{mod + "/mem", mod + "/front", "golang.org/x/sys/unix"}},
		}
	}
	tests := []struct {
		name   string
		table  string
		change func(p []roomPackage) []roomPackage
		want   string // a problem containing it; empty: none
	}{
		{name: "all allowed", table: table},
		{name: "an import of another store", table: table, want: "package mem (store room) imports red, which the rooms table",
			change: func(p []roomPackage) []roomPackage { p[1].imports = append(p[1].imports, mod+"/red"); return p }},
		{name: "an outside module only another package may import", table: table, want: "package mem (store room) imports github.com/redis/rueidis,",
			change: func(p []roomPackage) []roomPackage {
				p[1].imports = append(p[1].imports, "github.com/redis/rueidis")
				return p
			}},
		{name: "a module whose name the allowed one starts with", table: table, want: "imports go.yaml.in/yaml/v3x,",
			change: func(p []roomPackage) []roomPackage {
				p[3].imports = append(p[3].imports, "go.yaml.in/yaml/v3x")
				return p
			}},
		{name: "an adapter importing a store", table: table, want: "package front (adapter room) imports mem,",
			change: func(p []roomPackage) []roomPackage { p[4].imports = append(p[4].imports, mod+"/mem"); return p }},
		{name: "a program importing a test helper", table: table, want: "package cmd/x (program room) imports internal/th,",
			change: func(p []roomPackage) []roomPackage { p[6].imports = append(p[6].imports, mod+"/internal/th"); return p }},
		{name: "a package in no room", table: table, want: "package newpkg is in no room",
			change: func(p []roomPackage) []roomPackage {
				return append(p, roomPackage{path: mod + "/newpkg"})
			}},
		{name: "a listed package that does not exist", table: table, want: "room \"adapter\" lists front, which is no package",
			change: func(p []roomPackage) []roomPackage { return slices.Delete(p, 4, 5) }},
		{name: "an unknown name in may import", table: strings.Replace(table, "`core`, `internal/h`", "`core`, `internal/nope`", 1),
			want: "room \"adapter\" may import \"internal/nope\", which is no room and no package"},
		{name: "an only-clause naming a package of another room", table: strings.Replace(table, "(only `red`)", "(only `front`)", 1),
			want: "room \"store\": \"github.com/redis/rueidis\" (only front): front is not in the room"},
		{name: "a package in two rooms", table: strings.Replace(table, "| `front` |", "| `front`, `mem` |", 1),
			want: "package mem is in two rooms"},
		{name: "a room listed twice", table: strings.Replace(table, "| test helper |", "| helper |", 1),
			want: "room \"helper\" is listed twice"},
		{name: "an exception naming no room", table: strings.Replace(table, "anything but `test helper`", "anything but `tests`", 1),
			want: "room \"program\": \"tests\" is no room"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rooms, err := parseRooms(tt.table, mod)
			if err != nil {
				t.Fatal(err)
			}
			pkgs := good()
			if tt.change != nil {
				pkgs = tt.change(pkgs)
			}
			problems := checkRooms(rooms, pkgs, mod)
			if tt.want == "" {
				if len(problems) > 0 {
					t.Fatalf("problems, want none:\n%s", strings.Join(problems, "\n"))
				}
				return
			}
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }) {
				t.Fatalf("no problem containing %q; got:\n%s", tt.want, strings.Join(problems, "\n"))
			}
		})
	}
}

// TestParseRoomsErrors: a "may import" cell the test cannot read fails,
// instead of allowing or forbidding by accident.
func TestParseRoomsErrors(t *testing.T) {
	head := roomsHeading + "\n\n| room | packages | may import |\n|---|---|---|\n"
	for _, tt := range []struct{ row, want string }{
		{"| core | `floodgate` | the standard library only |", "expected a `name`"},
		{"| core | `floodgate` | `a` and `b` |", "expected a comma"},
		{"| core | | `a` |", "lists no package"},
		{"| core | `floodgate` |", "cells"},
	} {
		_, err := parseRooms(head+tt.row+"\n", "example.com/m")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.row, err, tt.want)
		}
	}
	if _, err := parseRooms("# no table\n", "example.com/m"); err == nil {
		t.Error("a document without the rooms section parsed")
	}
}
