package docstest

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSpanAttributes: docs/OBSERVABILITY.md's one table of spans and
// attributes lists every attribute key the code sets on a span, and no
// other, and names every span the code starts.
func TestSpanAttributes(t *testing.T) {
	const doc = "docs/OBSERVABILITY.md"
	sources := []string{"decide/trace.go", "envoy/quota.go", "server/storeapi.go"}
	attrRE := regexp.MustCompile(`"(ratelimit\.[a-z_.]+)"`)
	spanRE := regexp.MustCompile(`"(floodgate\.[a-z_.]+)"`)
	var inCode, spans []string
	for _, f := range sources {
		src := readDoc(t, f)
		for _, m := range attrRE.FindAllStringSubmatch(src, -1) {
			inCode = append(inCode, m[1])
		}
		for _, m := range spanRE.FindAllStringSubmatch(src, -1) {
			spans = append(spans, m[1])
		}
	}
	text := readDoc(t, doc)
	start := strings.Index(text, "| span | attribute | type | value |")
	if start < 0 {
		t.Fatalf("%s has no table of spans and attributes", doc)
	}
	table := text[start:]
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	var inDoc []string
	for _, line := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		if m := regexp.MustCompile("`(ratelimit\\.[a-z_.]+)`").FindStringSubmatch(cells[2]); m != nil {
			inDoc = append(inDoc, m[1])
		}
	}
	slices.Sort(inCode)
	inCode = slices.Compact(inCode)
	slices.Sort(inDoc)
	for _, a := range inCode {
		if !slices.Contains(inDoc, a) {
			t.Errorf("the code sets attribute %s, which %s's table does not list", a, doc)
		}
	}
	for _, a := range inDoc {
		if !slices.Contains(inCode, a) {
			t.Errorf("%s's table lists attribute %s, which no code sets", doc, a)
		}
	}
	for _, s := range spans {
		if !strings.Contains(table, "`"+s) {
			t.Errorf("the code starts span %s…, which %s's table does not name", s, doc)
		}
	}
}
