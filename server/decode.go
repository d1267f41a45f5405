package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodeStrict decodes body, one JSON object, into v, a pointer to a
// struct, more strictly than encoding/json: the body must be valid UTF-8
// with no lone UTF-16 surrogate escape (which encoding/json would fold
// into U+FFFD, so that distinct keys would collide), and each field name
// must be one of v's json names exactly, once (encoding/json matches names
// case-insensitively, so "Rule" would override "rule"). Nothing may follow
// the object. The error says what is wrong, for a 400 answer.
func decodeStrict(body []byte, v any) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8; keys and rule names must be UTF-8 text")
	}
	if loneSurrogate(body) {
		return errors.New(`the body has a lone UTF-16 surrogate escape (such as "\ud800"), which is no character; keys and rule names must be UTF-8 text`)
	}
	known := jsonNames(reflect.TypeOf(v).Elem())
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("the body is not a JSON object such as {\"rule\":\"api\",\"key\":\"user-42\"}")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("the body is not valid JSON: %v", err)
		}
		name, _ := tok.(string)
		switch {
		case !slices.Contains(known, name):
			return fmt.Errorf("the body has the field %q, which is not one of %s (names are case-sensitive)", name, quoteAll(known))
		case seen[name]:
			return fmt.Errorf("the body has the field %q twice", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("the body is not valid JSON: %v", err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("the body is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err == nil {
		return errors.New("the body has data after the JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the body is not valid JSON of the expected shape: %v", err)
	}
	return nil
}

// loneSurrogate reports whether the JSON text b has a \uXXXX escape of a
// UTF-16 surrogate that is not the first half of a pair followed by the
// second.
func loneSurrogate(b []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // an escape such as \\ or \": skip the escaped byte
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			low, ok := hex4(i + 6)
			if !ok || low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

// jsonNames returns the json names of struct type t's fields.
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
