package grpclimit

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/internal/keypart"
)

// KeyFunc returns the key a rule counts a call under, from the call's
// context (its metadata, peer and values) and full method name. An empty
// key with a nil error means the rule does not apply to the call; an error
// means the rule cannot decide, and its FailureMode applies.
//
// A key from the call's metadata is the client's to choose: pair a rule
// keyed by it with one keyed by the peer's address. Keys longer than 256
// bytes are stored as their SHA-256.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// PeerAddress keys calls by the client's address as e finds it: the
// connection's peer, or, behind e's trusted proxies, the x-forwarded-for
// (or forwarded) metadata read as package clientip reads the HTTP headers;
// IPv6 grouped by e's prefix. It fails with clientip.ErrNoAddress for a
// peer that is not an IP address (a Unix socket, an in-memory listener). A
// Rule with a nil Key uses PeerAddress with Config.ClientIP. A nil e is the
// clientip.Resolver zero value: trust no proxy, group IPv6 by /64.
func PeerAddress(e *clientip.Extractor) KeyFunc {
	if e == nil {
		e, _ = clientip.New(clientip.Resolver{}) // the zero value is valid
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", clientip.ErrNoAddress
		}
		var h http.Header
		if v := metadata.ValueFromIncomingContext(ctx, "x-forwarded-for"); len(v) > 0 {
			h = http.Header{"X-Forwarded-For": v}
		}
		if v := metadata.ValueFromIncomingContext(ctx, "forwarded"); len(v) > 0 {
			if h == nil {
				h = http.Header{}
			}
			h["Forwarded"] = v
		}
		a, err := e.Resolve(p.Addr.String(), h)
		if err != nil {
			return "", err
		}
		return e.KeyOf(a), nil
	}
}

// Metadata keys calls by the value of the named request metadata, such as
// an API key ("x-api-key"); the rule does not apply to calls without it.
// With several values, the first is used.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			return strings.TrimSpace(v[0]), nil
		}
		return "", nil
	}
}

// ContextValue keys calls by a value in the call's context, such as the
// authenticated identity an earlier interceptor stored under key. The
// value must be a string, an integer or a fmt.Stringer; the rule does not
// apply to calls without it, and any other type is an error. Interceptors
// run in the order they are chained: put the authenticating one first.
func ContextValue(key any) KeyFunc {
	return func(ctx context.Context, _ string) (string, error) { return keypart.FromValue(key, ctx.Value(key)) }
}

// Method keys calls by their full method name, for a rule that gives each
// method its own budget.
func Method() KeyFunc {
	return func(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }
}

// Combine keys calls by all of fns together, such as the tenant and the
// peer's address: one budget per pair. The rule does not apply if any of
// them returns an empty key, and fails if any fails. The parts are joined
// unambiguously, as httplimit.Combine joins them.
func Combine(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, fullMethod string) (string, error) {
		var b strings.Builder
		for i, f := range fns {
			k, err := f(ctx, fullMethod)
			if err != nil || k == "" {
				return "", err
			}
			keypart.Join(&b, i, k)
		}
		return b.String(), nil
	}
}

// ClientCertificate keys calls by the identity of the client's verified TLS
// certificate: its first URI subject alternative name (a SPIFFE ID such as
// "spiffe://example.org/billing"), or else its subject's common name. The
// rule does not apply to calls without a verified client certificate (a
// server whose tls.Config does not verify client certificates never has
// one).
func ClientCertificate() KeyFunc {
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return "", nil
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
			return "", nil
		}
		leaf := info.State.VerifiedChains[0][0]
		if len(leaf.URIs) > 0 {
			return leaf.URIs[0].String(), nil
		}
		return leaf.Subject.CommonName, nil
	}
}
