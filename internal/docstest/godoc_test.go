package docstest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// libraryPackages are the packages a Go program imports to use floodgate
// as a library.
var libraryPackages = []string{".", "memory", "redisstore", "remotestore", "splitstore", "httplimit", "grpclimit",
	"decide", "clientip", "clocktest", "health", "storetest"}

// TestExportedNamesDocumented: every exported name of the library packages
// (each constant and variable of a group too, and the methods of exported
// types) has a doc comment of its own that begins with its name, so go doc
// tells a newcomer what each is.
func TestExportedNamesDocumented(t *testing.T) {
	for _, pkg := range libraryPackages {
		dir := filepath.Join(root(t), pkg)
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for _, f := range p.Files {
				for _, bad := range undocumented(f) {
					t.Errorf("%s: %s", fset.Position(bad.pos), bad.why)
				}
			}
		}
	}
}

// finding is a name without a proper doc comment.
type finding struct {
	pos token.Pos
	why string
}

// undocumented returns the exported names of f whose doc comment is
// missing or does not begin with the name.
func undocumented(f *ast.File) []finding {
	var out []finding
	check := func(name *ast.Ident, doc, line *ast.CommentGroup, requireName bool) {
		switch {
		case !name.IsExported():
		case doc == nil && line == nil:
			out = append(out, finding{name.Pos(), name.Name + " has no doc comment"})
		case requireName && doc != nil && !strings.HasPrefix(doc.Text(), name.Name+" ") && !strings.HasPrefix(doc.Text(), "Deprecated"):
			out = append(out, finding{name.Pos(), name.Name + "'s doc comment does not begin with its name: " + strings.SplitN(doc.Text(), "\n", 2)[0]})
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil && !exportedReceiver(d.Recv) {
				continue
			}
			check(d.Name, d.Doc, nil, true)
		case *ast.GenDecl:
			grouped := d.Lparen.IsValid()
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					doc := s.Doc
					if !grouped {
						doc = d.Doc
					}
					check(s.Name, doc, s.Comment, true)
				case *ast.ValueSpec:
					doc := s.Doc
					if !grouped {
						doc = d.Doc
					}
					for _, n := range s.Names {
						// A spec naming several values, or one in a
						// group, may describe them together.
						check(n, doc, s.Comment, !grouped && len(s.Names) == 1)
					}
				}
			}
		}
	}
	return out
}

// exportedReceiver reports whether a method's receiver type is exported.
func exportedReceiver(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	typ := recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
