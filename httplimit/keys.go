package httplimit

import (
	"net/http"
	"strings"

	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/internal/keypart"
)

// KeyFunc returns the key a rule counts a request under. An empty key with
// a nil error means the rule does not apply to the request (say, no API key
// was sent: leave such requests to another rule). An error means the rule
// cannot decide, and its FailureMode applies.
//
// A key taken from the request (a header) is the client's to choose, and
// every new value gets a fresh budget: pair such a rule with one keyed by
// the client's address. Keys longer than 256 bytes are stored as their
// SHA-256.
type KeyFunc func(r *http.Request) (string, error)

// ClientIP keys requests by the client's address as e finds it (see package
// clientip): "203.0.113.7", or "2001:db8:1:2::/64" for IPv6 grouped by its
// prefix. It fails only for a request whose peer address is not an IP
// address (clientip.ErrNoAddress). A Rule with a nil Key uses ClientIP with
// Config.ClientIP. A nil e is the clientip.Resolver zero value: trust no
// proxy, group IPv6 by /64.
func ClientIP(e *clientip.Extractor) KeyFunc {
	if e == nil {
		e, _ = clientip.New(clientip.Resolver{}) // the zero value is valid
	}
	return e.Key
}

// Header keys requests by the value of the named request header, such as an
// API key; the rule does not apply to requests without it. With several
// header lines, the first is used.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header[name]; len(v) > 0 {
			return strings.TrimSpace(v[0]), nil
		}
		return "", nil
	}
}

// ContextValue keys requests by a value in the request's context, such as
// the authenticated user an earlier middleware stored under key. The value
// must be a string, an integer or a fmt.Stringer; the rule does not apply to
// requests without it (nil, or an empty string), and any other type is an
// error.
func ContextValue(key any) KeyFunc {
	return func(r *http.Request) (string, error) { return keypart.FromValue(key, r.Context().Value(key)) }
}

// Combine keys requests by all of fns together, such as the API key and the
// client's address: one budget per pair. The rule does not apply if any of
// them returns an empty key, and fails if any fails. The parts are joined
// unambiguously: a '|' or '\' inside a part is escaped with '\'.
func Combine(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, f := range fns {
			k, err := f(r)
			if err != nil || k == "" {
				return "", err
			}
			keypart.Join(&b, i, k)
		}
		return b.String(), nil
	}
}
