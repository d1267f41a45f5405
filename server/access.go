package server

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/authtoken"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/tracing"
)

// Tokens is a set of bearer tokens with their scopes, from ParseTokens.
// Requests present one as "Authorization: Bearer TOKEN".
type Tokens = authtoken.Set

// Scope is what a token permits: ScopeDecide, ScopeAdmin, ScopeMetrics.
type Scope = authtoken.Scope

// The scopes of a token.
const (
	// ScopeDecide permits POST /v1/check, /v1/forward-auth and the extra
	// routes of Options.Routes (such as Envoy's POST /json).
	ScopeDecide = authtoken.ScopeDecide
	// ScopeAdmin permits POST /v1/reset and GET /v1/rules.
	ScopeAdmin = authtoken.ScopeAdmin
	// ScopeMetrics permits GET /metrics on Handler (OpsHandler's /metrics
	// needs no token).
	ScopeMetrics = authtoken.ScopeMetrics
)

// ParseTokens reads tokens written one per line as NAME SCOPES TOKEN (such
// as "ingress decide 3f9c..."), scopes being a comma-separated list of
// decide, admin and metrics, and tokens of 128 bits of randomness and more
// by their length and alphabet (placeholders such as "replace-me-..." are
// refused by name). Blank lines and lines starting with '#' are skipped;
// ';' also separates entries.
// source names where they came from in errors, which never show a token.
func ParseTokens(data, source string) (*Tokens, error) { return authtoken.Parse(data, source) }

// ErrOverloaded is the error of a check the server did not ask the store
// about because Options.MaxInFlight requests were already running: the
// rule's failure mode answers it.
var ErrOverloaded = errors.New("server: too many requests in flight; not asking the store")

// SetTokens replaces the tokens requests must present; nil turns
// authentication off. Requests in flight finish under the tokens they were
// checked against. It is safe to call at any time (the CLI calls it on
// SIGHUP and when the tokens file changes).
func (s *Server) SetTokens(t *Tokens) {
	if t != nil && t.Len() == 0 {
		t = nil
	}
	s.tokens.Store(t)
}

// AuthEnabled reports whether requests must present a token.
func (s *Server) AuthEnabled() bool { return s.tokens.Load() != nil }

// route is one endpoint of the API and what guards it.
type route struct {
	name  string          // the "route" label of metrics
	scope authtoken.Scope // what a token needs; 0: open
	json  bool            // POST bodies must be application/json
	// limited puts the endpoint under the in-flight cap.
	limited bool
}

// guard wraps h with route's checks, in order: the token (401, 403), the
// content type of a POST (415), and the in-flight cap, which hands h
// ErrOverloaded rather than refusing, so that a decision follows its rule's
// failure mode.
func (s *Server) guard(rt route, h func(http.ResponseWriter, *http.Request, error)) http.Handler {
	if rt.limited {
		s.metrics.shed.WithLabelValues(rt.name) // from 0, for rate()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.scope != 0 && !s.authorize(w, r, rt) {
			return
		}
		if rt.json && r.Method == http.MethodPost && !isJSON(r.Header.Get("Content-Type")) {
			w.Header().Set("Accept-Post", "application/json")
			problem.Error(w, http.StatusUnsupportedMediaType,
				fmt.Sprintf("the body must be sent with Content-Type: application/json, not %q", r.Header.Get("Content-Type")))
			return
		}
		if s.traced && rt.limited {
			// The engine's spans (and the store API's calls) continue
			// the caller's trace.
			r = r.WithContext(tracing.FromHeader(r.Context(), r.Header))
		}
		if !rt.limited {
			h(w, r, nil)
			return
		}
		select {
		case s.inFlight <- struct{}{}:
			s.metrics.inFlight.Inc()
			defer func() { s.metrics.inFlight.Dec(); <-s.inFlight }()
			h(w, r, nil)
		default:
			s.metrics.shed.WithLabelValues(rt.name).Inc()
			h(w, r, ErrOverloaded)
		}
	})
}

// authorize checks the request's bearer token for rt's scope when
// authentication is on; on failure it has answered 401 or 403.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, rt route) bool {
	tokens := s.tokens.Load()
	if tokens == nil {
		return true
	}
	_, err := tokens.Authorize(r.Header.Get("Authorization"), rt.scope)
	if err == nil {
		return true
	}
	w.Header()["Cache-Control"] = []string{"no-store"}
	switch {
	case errors.Is(err, authtoken.ErrForbidden):
		s.metrics.authFailures.WithLabelValues("forbidden").Inc()
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="floodgate", error="insufficient_scope", scope=%q`, rt.scope.String()))
		problem.Error(w, http.StatusForbidden, fmt.Sprintf("%s %s needs a token with the %q scope", r.Method, r.URL.Path, rt.scope))
	case errors.Is(err, authtoken.ErrMissing):
		s.metrics.authFailures.WithLabelValues("missing").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
		problem.Error(w, http.StatusUnauthorized, "send a token as Authorization: Bearer TOKEN")
	default:
		s.metrics.authFailures.WithLabelValues("invalid").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate", error="invalid_token"`)
		problem.Error(w, http.StatusUnauthorized, "the bearer token is not valid")
	}
	return false
}

// isJSON reports whether a Content-Type is application/json (parameters
// such as charset allowed) or a +json type.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// overloaded answers a request that is not a decision and arrived over the
// in-flight cap: 503 with the engine's retry delay.
func (s *Server) overloaded(w http.ResponseWriter, r *http.Request) {
	w.Header()[ratelimitheader.HeaderRetryAfter] = []string{ratelimitheader.RetryAfter(s.engine.UnavailableRetryAfter())}
	s.fail(w, r, http.StatusServiceUnavailable, problem.KindOverloaded, "the server is at its limit of concurrent requests; retry after the number of seconds in Retry-After", nil)
}
