package yamlfield

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Parse reads the first YAML document of data into a node, for every
// dialect floodgate reads, and returns the decoder for what follows (see
// [NextDocument]). An empty file's error is io.EOF. Every other error is
// an *Error naming the line and, where the text shows what went wrong, a
// fix: bytes that are not UTF-8 (with the byte's offset), a no-break
// space (U+00A0) in the indentation, which the parser would take for part
// of a key, a tab in the indentation, and the parser's other complaints
// with a hint of their usual cause. The Errors have no File: the caller
// names the file.
func Parse(data []byte) (*yaml.Node, *yaml.Decoder, error) {
	if e := checkText(data); e != nil {
		return nil, nil, e
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, io.EOF
		}
		return nil, nil, SyntaxError(data, err)
	}
	return &doc, dec, nil
}

// checkText reports what the parser would misread or report without a
// line: the first byte that is not UTF-8, and a no-break space in a
// line's indentation. A file that starts with a UTF-16 byte order mark
// is left to the parser, which reads UTF-16.
func checkText(data []byte) *Error {
	if bytes.HasPrefix(data, []byte{0xFE, 0xFF}) || bytes.HasPrefix(data, []byte{0xFF, 0xFE}) {
		return nil
	}
	line, start := 1, 0 // the current line and the offset where it starts
	indent := true      // still in the line's leading white space
	for off := 0; off < len(data); {
		r, size := utf8.DecodeRune(data[off:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return &Error{Line: line, Reason: fmt.Sprintf("byte %d of the line (offset %d in the file, 0x%02X) is not UTF-8", off-start+1, off, data[off]),
				Fix: "save the file as UTF-8 (it may be Latin-1 or another 8-bit encoding)"}
		case r == '\n':
			line, start, indent = line+1, off+1, true
		case r == '\u00a0' && indent:
			return &Error{Line: line, Reason: fmt.Sprintf("has a no-break space (U+00A0) in its indentation, at byte %d of the line", off-start+1),
				Fix: "indent with plain spaces (an editor or a copy from a web page put it there)"}
		case r != ' ' && r != '\t' && r != '\r' && r != '-':
			indent = false
		}
		off += size
	}
	return nil
}

// parserLine matches the line the parser names: "yaml: line 3: ...".
var parserLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// SyntaxError returns the *Error of a YAML parser error err on data: its
// line, its message, and a hint of the usual cause.
func SyntaxError(data []byte, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := parserLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	lines := strings.Split(string(data), "\n")
	// yaml.v3 names no line for the first, and for a parser (not a
	// scanner) error counts lines from 0, at the start of the enclosing
	// block or at the problem: the error is then on the first line from
	// there whose text up to it gives the same error.
	if !scannerError(msg) {
		line = problemLine(lines, min(max(line, 1), len(lines)), msg)
	} else if line == 0 {
		line = 1
	}
	e := &Error{Line: line, Reason: "is not valid YAML: " + msg}
	text := func(n int) string {
		if n < 1 || n > len(lines) {
			return ""
		}
		return lines[n-1]
	}
	// A tab in the indentation: on the line named, or else the first.
	tabbed := 0
	if tabIndent(text(line)) {
		tabbed = line
	} else {
		for i := range lines {
			if tabIndent(lines[i]) {
				tabbed = i + 1
				break
			}
		}
	}
	switch {
	case tabbed > 0:
		e.Fix = "YAML indents with spaces, not tabs: replace the tabs at the start of line " + strconv.Itoa(tabbed) + " with spaces"
		if e.Line == 0 || strings.Contains(msg, "tab character") {
			e.Line = tabbed
		}
	case strings.Contains(msg, "mapping values are not allowed"):
		e.Fix = "a key is indented more than the keys beside it, or a value holds \": \"; align the key with those above it, or quote the value"
	case strings.Contains(msg, "did not find expected key"), strings.Contains(msg, "did not find expected '-' indicator"):
		e.Fix = "a line is indented less or more than the lines beside it, or a quote is not closed; keys of one mapping, and items of one list, start in the same column"
	case strings.Contains(msg, "could not find expected ':'"):
		e.Fix = "a key has no ':' after it, or a quote is not closed"
	case strings.Contains(msg, "found character that cannot start any token"):
		e.Fix = "a value starts with a character YAML reserves (such as @ or `); quote the value"
	case strings.Contains(msg, "found unknown escape character"):
		e.Fix = `in double quotes a backslash starts an escape: write \\ for a backslash, or use single quotes`
	case strings.Contains(msg, "unexpected end of stream"), strings.Contains(msg, "did not find expected node content"):
		e.Fix = "a quote or a bracket is not closed, or a value is missing"
	case strings.Contains(msg, "control characters are not allowed"):
		for i, l := range lines {
			if j := strings.IndexFunc(l, func(r rune) bool { return r < 0x20 && r != '\t' && r != '\r' }); j >= 0 {
				e.Line = i + 1
				e.Fix = fmt.Sprintf("remove the control character (0x%02X) at byte %d of the line", l[j], j+1)
				break
			}
		}
	}
	return e
}

// scannerErrors start the messages of yaml.v3's scanner, whose line is the
// problem's.
var scannerErrors = []string{
	"found character that cannot start any token", "mapping values are not allowed", "found unknown escape character",
	"found unexpected end of stream", "could not find expected ':'", "control characters are not allowed",
	"found a tab character", "did not find URI escaped octet", "found unexpected document indicator",
	"found incompatible YAML document", "found extra characters", "did not find expected comment or line break",
	"did not find expected whitespace or line break", "invalid ", "incomplete UTF-8",
}

func scannerError(msg string) bool {
	for _, p := range scannerErrors {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// problemLine returns the first line from from on (1-based) such that the
// text up to and including it fails to parse with msg; from if none does
// within a few thousand lines.
func problemLine(lines []string, from int, msg string) int {
	for n := max(from, 1); n <= len(lines) && n < from+2000; n++ {
		var doc yaml.Node
		err := yaml.Unmarshal([]byte(strings.Join(lines[:n], "\n")+"\n"), &doc)
		if err == nil {
			continue
		}
		got := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := parserLine.FindStringSubmatch(err.Error()); m != nil {
			got = m[2]
		}
		if got == msg {
			return n
		}
	}
	return from
}

// tabIndent reports whether a line's indentation holds a tab.
func tabIndent(line string) bool {
	lead := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
	return strings.Contains(lead, "\t") && strings.TrimSpace(line) != ""
}
