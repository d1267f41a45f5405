package server

import (
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-rl/floodgate/internal/problem"
)

// Handler returns the HTTP API with its probes and metrics:
//
//	POST /v1/check          one decision: {"rule","key","cost"}     scope decide
//	                        (names exact and once each, keys UTF-8 text:
//	                        invalid UTF-8 and lone surrogate escapes are
//	                        answered 400, never folded into U+FFFD)
//	POST /v1/reset          clear one key under one rule: {"rule","key"}  scope admin
//	GET  /v1/rules          the active rules                        scope admin
//	*    /v1/forward-auth   forward auth keyed on the client's address (any method)  scope decide
//	GET  /healthz           the process is up                       open
//	GET  /readyz            the store answers (with its nodes, if it reports them)  open
//	     Options.Probes     further probes (Envoy's GET /healthcheck)  open
//	GET  /metrics           Prometheus metrics                      scope metrics
//	POST /v1/store/...      the store API, when Options.StoreAPI is set  scope decide
//
// The scopes apply when authentication is on (Options.Tokens). POST bodies
// must be sent as application/json (415 otherwise), so that no web page can
// send one cross-site without a CORS preflight.
func (s *Server) Handler() http.Handler { return s.handler(true) }

// APIHandler is Handler without /metrics, for a server whose metrics are
// served apart, by OpsHandler on a listener of their own.
func (s *Server) APIHandler() http.Handler { return s.handler(false) }

// OpsHandler returns the probes and metrics alone (GET /healthz, /readyz,
// Options.Probes and /metrics) with no authentication, for a listener that
// only the monitoring network reaches.
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	s.probes(mux)
	mux.Handle("GET /metrics", s.metricsHandler())
	return problemsForUnrouted(mux)
}

func (s *Server) handler(withMetrics bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", s.guard(route{name: "check", scope: ScopeDecide, json: true, limited: true}, s.handleCheck))
	mux.Handle("POST /v1/reset", s.guard(route{name: "reset", scope: ScopeAdmin, json: true, limited: true}, s.handleReset))
	mux.Handle("GET /v1/rules", s.guard(route{name: "rules", scope: ScopeAdmin}, s.handleRules))
	// Any method: proxies send the sub-request with the original request's
	// method (nginx, Traefik) or GET (Caddy); the body is never read.
	mux.Handle("/v1/forward-auth", s.guard(route{name: "forward-auth", scope: ScopeDecide, limited: true}, s.handleForwardAuth))
	s.probes(mux)
	if withMetrics {
		metrics := s.metricsHandler()
		mux.Handle("GET /metrics", s.guard(route{name: "metrics", scope: ScopeMetrics}, func(w http.ResponseWriter, r *http.Request, _ error) {
			metrics.ServeHTTP(w, r)
		}))
	}
	if a := s.storeAPI; a != nil {
		a.register(mux, func(name string, h http.HandlerFunc) http.Handler {
			return s.guard(route{name: name, scope: ScopeDecide, json: true, limited: true}, func(w http.ResponseWriter, r *http.Request, shed error) {
				if shed != nil {
					a.overloaded(w)
					return
				}
				h(w, r)
			})
		})
	}
	for pattern, h := range s.routes {
		mux.Handle(pattern, s.guard(route{name: pattern, scope: ScopeDecide, json: true, limited: true}, func(w http.ResponseWriter, r *http.Request, shed error) {
			if shed != nil {
				s.overloaded(w, r)
				return
			}
			h.ServeHTTP(w, r)
		}))
	}
	return problemsForUnrouted(mux)
}

// probes adds /healthz, /readyz and Options.Probes, which are never
// authenticated nor under the in-flight cap: a probe must tell the truth
// when the API is saturated, and a prober holds no token.
func (s *Server) probes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	for pattern, h := range s.probeRoutes {
		mux.Handle(pattern, h)
	}
}

func (s *Server) metricsHandler() http.Handler {
	// OpenMetrics, when the scraper asks for it, carries the exemplars.
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry, EnableOpenMetrics: true})
}

// problemsForUnrouted answers requests the mux has no route for (404, or 405
// with its Allow header) with problem details instead of plain text.
func problemsForUnrouted(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A path with empty, "." or ".." segments (or "*") is answered as
		// no endpoint, naming the canonical path, rather than redirected
		// as ServeMux would: a client re-sends its POST body to a 307.
		if p := r.URL.Path; p == "" || p[0] != '/' || canonical(p) != p {
			problem.Error(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s: write the path without empty, '.' or '..' segments (%s)", r.Method, p, canonical(p)))
			return
		}
		h, pattern := mux.Handler(r)
		if pattern != "" {
			h.ServeHTTP(w, r)
			return
		}
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if allow := probe.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		problem.Error(w, probe.status, fmt.Sprintf("no endpoint %s %s; see GET /v1/rules and POST /v1/check", r.Method, r.URL.Path))
	})
}

// canonical returns p cleaned as ServeMux would redirect to: rooted,
// without empty, "." or ".." segments, keeping a trailing slash.
func canonical(p string) string {
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// statusProbe records the status and headers a handler writes.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(status int)      { p.status = status }
