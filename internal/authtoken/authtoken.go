// Package authtoken holds the bearer tokens of floodgate serve and checks
// the tokens requests present: the one check every listener (HTTP API, gRPC)
// runs, with the scopes a token grants.
//
// Tokens are written one per line, as NAME SCOPES TOKEN:
//
//	# name    scopes         token
//	ingress   decide         Zs0f2k8...  (128 bits of randomness and more)
//	ops       admin,metrics  q8Lr7Xc...
//
// NAME appears in logs (never the token), SCOPES is a comma-separated list
// of decide, admin and metrics, and TOKEN is the secret itself. Blank lines
// and lines starting with '#' are ignored; ';' also separates entries, for
// tokens kept in one environment variable.
//
// A presented token's SHA-256 is compared with every token's in constant
// time, so the time taken tells neither how much of a token was right nor
// which one.
package authtoken

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Scope is a set of permissions a token grants.
type Scope uint8

// The scopes.
const (
	// ScopeDecide permits decisions: POST /v1/check, forward auth, Envoy's
	// rate-limit service (gRPC and POST /json).
	ScopeDecide Scope = 1 << iota
	// ScopeAdmin permits administration: POST /v1/reset, GET /v1/rules.
	ScopeAdmin
	// ScopeMetrics permits GET /metrics on the API's listener.
	ScopeMetrics
)

// scopeNames are the scopes as token files write them, in bit order.
var scopeNames = [...]string{"decide", "admin", "metrics"}

// String returns the scopes' names joined by ','.
func (s Scope) String() string {
	var names []string
	for i, n := range scopeNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// ParseScope returns the scopes of a comma-separated list such as
// "decide,admin".
func ParseScope(list string) (Scope, error) {
	var s Scope
	for _, name := range strings.Split(list, ",") {
		i := indexOf(name)
		if i < 0 {
			return 0, fmt.Errorf("scope %q is not one of %s", name, strings.Join(scopeNames[:], ", "))
		}
		s |= 1 << i
	}
	return s, nil
}

func indexOf(name string) int {
	for i, n := range scopeNames {
		if n == name {
			return i
		}
	}
	return -1
}

// MinTokenLen is the shortest token a Set accepts: a token is a secret,
// generated (openssl rand -hex 32), never a word.
const MinTokenLen = 16

// MinTokenBits is the least randomness a Set accepts in a token, as
// Strength estimates it: 32 hex digits, 22 base64 characters.
const MinTokenBits = 128

// placeholders are marks of the documented placeholder tokens (such as
// deploy/kubernetes/secret.yaml's), refused whatever their length: they
// are public.
var placeholders = []string{"replace-me", "replace_me", "replaceme", "change-me", "change_me", "changeme", "placeholder"}

// Strength estimates the bits of randomness of a token by its length and
// alphabet: 4 a character for hex digits of one case, else log2 of the
// character classes it uses (10 digits, 26 lower, 26 upper letters, and
// each distinct other character). It is an upper bound for a generated
// token and far above what a word or a pattern holds.
func Strength(token string) float64 {
	if token == "" {
		return 0
	}
	alphabet := 16.0
	if !isHex(token) {
		var digit, lower, upper bool
		other := map[rune]bool{}
		for _, r := range token {
			switch {
			case r >= '0' && r <= '9':
				digit = true
			case r >= 'a' && r <= 'z':
				lower = true
			case r >= 'A' && r <= 'Z':
				upper = true
			default:
				other[r] = true
			}
		}
		alphabet = float64(len(other))
		for _, c := range []struct {
			used bool
			n    float64
		}{{digit, 10}, {lower, 26}, {upper, 26}} {
			if c.used {
				alphabet += c.n
			}
		}
	}
	return float64(utf8.RuneCountInString(token)) * math.Log2(alphabet)
}

// isHex reports whether s is hex digits of one case.
func isHex(s string) bool {
	lower, upper := true, true
	for _, r := range s {
		digit := r >= '0' && r <= '9'
		lower = lower && (digit || r >= 'a' && r <= 'f')
		upper = upper && (digit || r >= 'A' && r <= 'F')
	}
	return lower || upper
}

// Weak says why token is not fit to be one ("" if it is): a documented
// placeholder, or under MinTokenBits of randomness.
func Weak(token string) string {
	low := strings.ToLower(token)
	for _, p := range placeholders {
		if strings.Contains(low, p) {
			return fmt.Sprintf("is a placeholder (it says %q): anyone who read the example knows it", p)
		}
	}
	if len(token) < MinTokenLen {
		return fmt.Sprintf("is %d characters long, shorter than %d", len(token), MinTokenLen)
	}
	if bits := Strength(token); bits < MinTokenBits {
		return fmt.Sprintf("holds at most %.0f bits of randomness by its length and alphabet, under %d", bits, MinTokenBits)
	}
	return ""
}

// Errors of Set.Authorize, for front ends to map onto their protocol: 401
// or gRPC UNAUTHENTICATED for the first two, 403 or PERMISSION_DENIED for
// ErrForbidden.
var (
	// ErrMissing: the request presents no bearer token.
	ErrMissing = errors.New("authtoken: no bearer token")
	// ErrInvalid: the token presented is not one of the set's.
	ErrInvalid = errors.New("authtoken: the bearer token is not valid")
	// ErrForbidden: the token is valid but lacks the scope needed.
	ErrForbidden = errors.New("authtoken: the token lacks the scope needed")
)

// Token is one token of a Set.
type Token struct {
	// Name identifies the token in logs.
	Name string
	// Scope is what the token permits.
	Scope Scope
	sum   [sha256.Size]byte
}

// Set is a set of tokens. The zero value and nil hold no token. A Set is
// immutable, so it is safe for concurrent use; reloading makes a new one.
type Set struct {
	tokens []Token
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Parse reads tokens in the format of the package comment. source names
// where they came from (a file, an environment variable) in errors, which
// give the line but never the token.
func Parse(data, source string) (*Set, error) {
	var errs []error
	s := &Set{}
	seen := map[[sha256.Size]byte]string{}
	names := map[string]bool{}
	line := 0
	for _, raw := range strings.Split(data, "\n") {
		line++
		for _, entry := range strings.Split(raw, ";") {
			entry = strings.TrimSpace(entry)
			if entry == "" || strings.HasPrefix(entry, "#") {
				continue
			}
			bad := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("%s:%d: %s", source, line, fmt.Sprintf(format, args...)))
			}
			f := strings.Fields(entry)
			if len(f) != 3 {
				bad("want NAME SCOPES TOKEN (such as: ingress decide $(openssl rand -hex 32)), found %d fields", len(f))
				continue
			}
			name, scopes, token := f[0], f[1], f[2]
			if !namePattern.MatchString(name) {
				bad("name %q must be 1-64 letters, digits, '_', '.' or '-'", name)
				continue
			}
			if names[name] {
				bad("name %q is used twice", name)
				continue
			}
			names[name] = true
			scope, err := ParseScope(scopes)
			if err != nil {
				bad("token %q: %v", name, err)
				continue
			}
			if why := Weak(token); why != "" {
				bad("token %q %s; generate one with: openssl rand -hex 32", name, why)
				continue
			}
			sum := sha256.Sum256([]byte(token))
			if prev, dup := seen[sum]; dup {
				bad("token %q is the same secret as token %q; give each client its own", name, prev)
				continue
			}
			seen[sum] = name
			s.tokens = append(s.tokens, Token{Name: name, Scope: scope, sum: sum})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(s.tokens) == 0 {
		return nil, fmt.Errorf("%s: no token; write one per line as NAME SCOPES TOKEN", source)
	}
	return s, nil
}

// Len returns the number of tokens in s.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.tokens)
}

// Names returns the tokens' names and scopes, for logs.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s.tokens))
	for i, t := range s.tokens {
		out[i] = t.Name + "(" + t.Scope.String() + ")"
	}
	return out
}

// BearerToken returns the token of an Authorization value of the Bearer
// scheme (RFC 6750; the scheme is case-insensitive), and whether there was
// one.
func BearerToken(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Authorize checks the Authorization value of a request (HTTP header or
// gRPC metadata) for a token with every scope in need. It returns the
// token's name, or ErrMissing, ErrInvalid or ErrForbidden. Every token of
// the set is compared, in constant time.
func (s *Set) Authorize(authorization string, need Scope) (string, error) {
	token, ok := BearerToken(authorization)
	if !ok {
		return "", ErrMissing
	}
	if s == nil {
		return "", ErrInvalid
	}
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], s.tokens[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", ErrInvalid
	}
	t := &s.tokens[found]
	if t.Scope&need != need {
		return t.Name, fmt.Errorf("%w: token %q has %s, the request needs %s", ErrForbidden, t.Name, t.Scope, need)
	}
	return t.Name, nil
}
