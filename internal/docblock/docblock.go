// Package docblock rewrites a generated block of a document: the text from
// a begin marker through an end marker, which a benchmark regenerates and
// a person leaves alone.
package docblock

import (
	"fmt"
	"os"
	"strings"
)

// Replace rewrites the file at path so that what lies between begin and
// end (both kept) is body. The file must hold begin, then end.
func Replace(path, begin, end, body string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(data)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no generated block (%q ... %q)", path, begin, end)
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc[:i]+begin+body+doc[j:]), info.Mode().Perm())
}
