package docblock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplace(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
		fails           bool
	}{
		{"replaces between the markers", "head\n<!-- b -->\nold\n<!-- e -->\ntail\n", "head\n<!-- b -->\nnew\n<!-- e -->\ntail\n", false},
		{"no begin", "head\n<!-- e -->\n", "", true},
		{"end first", "<!-- e -->\n<!-- b -->\n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "doc.md")
			if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			err := Replace(path, "<!-- b -->", "<!-- e -->", "\nnew\n")
			if tc.fails {
				if err == nil || !strings.Contains(err.Error(), "no generated block") {
					t.Errorf("Replace = %v, want an error naming the missing block", err)
				}
				return
			}
			got, _ := os.ReadFile(path)
			if err != nil || string(got) != tc.want {
				t.Errorf("Replace = %v, file %q; want %q", err, got, tc.want)
			}
		})
	}
}
