package docstest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestLuaPythonExample: LUA.md's Python example reads its scripts from the
// folder the document's `floodgate scripts --out` writes, and every
// algorithm it names has a script of that name there.
func TestLuaPythonExample(t *testing.T) {
	doc := readDoc(t, "docs/LUA.md")
	py := firstBlock(t, doc, "docs/LUA.md", "python")
	dir := regexp.MustCompile(`directory="([^"]+)"`).FindStringSubmatch(py)
	if dir == nil {
		t.Fatal("the Python example names no directory")
	}
	pySection := doc[strings.Index(doc, "## From Python"):]
	if !strings.Contains(pySection[:strings.Index(pySection, "```python")], "floodgate scripts --out "+dir[1]+"\n") {
		t.Errorf("the Python example reads %q, which the section never has `floodgate scripts --out` write", dir[1])
	}
	scripts := redisstore.Scripts()
	suffix := regexp.MustCompile(`"(\w+)": "\w+"`).FindAllStringSubmatch(py, -1)
	if len(suffix) != 4 {
		t.Fatalf("the Python example's SUFFIX table has %d algorithms", len(suffix))
	}
	for _, m := range suffix {
		if _, ok := scripts[m[1]+".lua"]; !ok {
			t.Errorf("the Python example reads %s/%s.lua, which floodgate scripts does not write", dir[1], m[1])
		}
	}
}
