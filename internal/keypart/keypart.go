// Package keypart holds the request-independent pieces of the front ends'
// key functions: a context value as a key, and several keys joined into one
// without ambiguity. The net/http middleware (httplimit) and the gRPC
// interceptors (grpclimit) key requests the same way through it.
package keypart

import (
	"fmt"
	"strconv"
	"strings"
)

// FromValue returns the key of a value found in a request's context under
// key: a string as it is, an integer in decimal, a fmt.Stringer's String.
// Nil (no value) is the empty key, which means the rule does not apply; any
// other type is an error.
func FromValue(key, v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case fmt.Stringer:
		return v.String(), nil
	default:
		return "", fmt.Errorf("context value %v is a %T, not a string, integer or fmt.Stringer", key, v)
	}
}

// Join appends part to b as the i-th part of a combined key: parts after the
// first are preceded by '|', and a '|' or '\' inside a part is escaped with
// '\', so distinct lists of parts never join to the same key.
func Join(b *strings.Builder, i int, part string) {
	if i > 0 {
		b.WriteByte('|')
	}
	for j := 0; j < len(part); j++ {
		if c := part[j]; c == '|' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(part[j])
	}
}
