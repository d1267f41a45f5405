package envoy

import (
	"strings"

	"github.com/floodgate-rl/floodgate/internal/storekey"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// keyNamespace is the namespace of the service's store keys.
const keyNamespace = "rls|"

// keySpace is a domain's store keys: storekey.Space in the "rls|"
// namespace with the domain as the rule, and the prefix of its keys short
// enough to be kept as they are (Space.Key("")), so that such a key is
// built in one allocation.
type keySpace struct {
	space  storekey.Space
	prefix string
}

// newKeySpace returns the key space of domain.
func newKeySpace(domain string) keySpace {
	ks := storekey.NewSpace(keyNamespace, domain)
	return keySpace{space: ks, prefix: ks.Key("")}
}

// storeKey is the store key of a descriptor in its domain's key space: the
// entries written key=value, joined by '|', with '\', '|' and '=' escaped,
// whatever rule matched, so that a key-only or wildcard rule counts each
// value apart, as the reference does, and distinct descriptors never share
// a key. An entry matched by a share_threshold wildcard is written
// key==pattern, so every value it matches shares one counter; no value can
// produce that, as a value's '=' is escaped.
func storeKey(keys keySpace, d *ratelimitv3.RateLimitDescriptor, r *Rule) string {
	var buf [192]byte // most keys are built on the stack
	b := append(buf[:0], keys.prefix...)
	for i, e := range d.GetEntries() {
		if i > 0 {
			b = append(b, '|')
		}
		b = appendEscaped(b, e.GetKey())
		b = append(b, '=')
		if r != nil && r.shared && i < len(r.levels) && r.levels[i].share != "" {
			b = append(b, '=')
			b = appendEscaped(b, r.levels[i].share)
			continue
		}
		b = appendEscaped(b, e.GetValue())
	}
	if entries := b[len(keys.prefix):]; len(entries) > storekey.MaxLen {
		return keys.space.Key(string(entries)) // hashed
	}
	return string(b)
}

// appendEscaped appends s to b with '\' before every '\', '|' and '='.
func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '|' || c == '=' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
}

// metricKey names a descriptor as the reference's statistics do:
// domain.key_value.key_value.
func metricKey(domainName string, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domainName)
	for _, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}
