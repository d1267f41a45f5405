// Package storekey is the store-key scheme every front end keys its rules
// with: a namespace, the rule's name escaped, and the key (hashed past
// MaxLen), so that distinct rules never share state and no rule name puts
// all of its keys on one Redis Cluster node.
package storekey

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxLen is the longest key that [Of] keeps as it is; a longer one
// (a huge header value, an attacker's padding) is stored as its SHA-256, so
// no client can make a store hold arbitrarily long keys.
const MaxLen = 256

// Of returns the store key under which the rule named rule counts key,
// in namespace ns: ns, the rule's name escaped, then '|' and the key, or '#'
// and the key's SHA-256 in hex when the key is longer than MaxLen.
// Distinct (rule, key) pairs in one namespace never share a store key,
// whatever bytes they hold.
//
// The name is escaped with '\': "\\", "\|" and "\#" for '\', '|' and '#',
// and "\(" and "\)" for '{' and '}', so that no rule name puts all of its
// keys on one Redis Cluster node. A key that holds a hash tag of its own
// keeps it, so keys sharing a tag share a slot and can be decided in one
// script. ns should hold no braces, for the same reason.
//
// The server and the CLI key in the empty namespace, the middleware in its
// Config.KeyPrefix, Envoy's service in "rls|" with the domain as the rule.
// A rule named "rls" in the empty namespace is written `\rls`, so that it
// never shares keys with Envoy's.
func Of(ns, rule, key string) string { return NewSpace(ns, rule).Key(key) }

// envoyNamespaceRule is the rule name that, in the empty namespace, would
// write the keys of Envoy's service's namespace ("rls|").
const envoyNamespaceRule = "rls"

// Space is the store keys of one rule in one namespace, escaped once:
// front ends make one per rule when they load their rules, and
// Space.Key(key) is Of(ns, rule, key) without escaping the name on every
// request.
type Space struct{ prefix string }

// NewSpace returns the key space of the rule named rule in namespace ns.
func NewSpace(ns, rule string) Space {
	var b strings.Builder
	b.Grow(len(ns) + len(rule) + 4)
	b.WriteString(ns)
	if ns == "" && rule == envoyNamespaceRule {
		b.WriteByte('\\') // would be Envoy's namespace, "rls|"
	}
	escapeRule(&b, rule)
	return Space{prefix: b.String()}
}

// Key returns the store key of key in the key space.
func (k Space) Key(key string) string {
	if len(key) <= MaxLen {
		return k.prefix + "|" + key
	}
	sum := sha256.Sum256([]byte(key))
	var b [1 + 2*sha256.Size]byte
	b[0] = '#'
	hex.Encode(b[1:], sum[:])
	return k.prefix + string(b[:])
}

// escapeRule writes a rule name to b, escaped as Of says.
func escapeRule(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "\\|#{}") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '|', '#':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '{':
			b.WriteString(`\(`)
		case '}':
			b.WriteString(`\)`)
		default:
			b.WriteByte(c)
		}
	}
}
