package docstest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// root is the repository's root folder.
func root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// readDoc returns a file of the repository, such as "docs/PROXIES.md".
func readDoc(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// taggedBlock returns the fenced code block that follows the comment
// "<!-- tested: TAG ...-->" in doc, so that a test runs exactly what the
// document shows.
func taggedBlock(t testing.TB, doc, name, tag string) string {
	t.Helper()
	marker := "<!-- tested: " + tag
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("%s has no %q marker", name, marker)
	}
	rest := doc[i:]
	open := strings.Index(rest, "\n```")
	if open < 0 {
		t.Fatalf("%s: no code block after %q", name, marker)
	}
	rest = rest[open+4:]
	nl := strings.IndexByte(rest, '\n')
	body := rest[nl+1:]
	end := strings.Index(body, "\n```")
	if end < 0 {
		t.Fatalf("%s: the block after %q does not end", name, marker)
	}
	return body[:end+1]
}

// firstBlock returns the first fenced block of the given language.
func firstBlock(t testing.TB, doc, name, lang string) string {
	t.Helper()
	open := "```" + lang + "\n"
	i := strings.Index(doc, open)
	if i < 0 {
		t.Fatalf("%s has no %s block", name, lang)
	}
	body := doc[i+len(open):]
	end := strings.Index(body, "\n```")
	if end < 0 {
		t.Fatalf("%s: the %s block does not end", name, lang)
	}
	return body[:end+1]
}

// replaceAll replaces each old with new in s, failing when one is absent,
// so that a test never silently runs a recipe it did not adapt.
func replaceAll(t testing.TB, s string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("the recipe no longer contains %q:\n%s", pairs[i], s)
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	return s
}
