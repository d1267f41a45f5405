// Package server is floodgate's standalone rate-limit service over HTTP: a
// JSON decision API, forward auth for reverse proxies, rule listing, health,
// readiness and Prometheus metrics. It is stateless: every instance shares
// the same store, so any number can run behind a load balancer.
//
// The server's rules can be replaced at run time with Reload (the CLI does so
// on SIGHUP); requests in flight finish under the rules they started with.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/health"
	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/internal/logthrottle"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/storeerr"
	"github.com/floodgate-rl/floodgate/internal/tracing"
)

// MaxBodyBytes bounds request bodies; larger ones are answered 413.
const MaxBodyBytes = 16 << 10

// DefaultMaxInFlight is Options.MaxInFlight when it is zero.
const DefaultMaxInFlight = 4096

// failLogInterval is the least time between two log lines of 503 answers.
const failLogInterval = time.Second

// Options are the server's dependencies. The zero value of each field picks
// a default.
type Options struct {
	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Registry receives the server's metrics and is served on /metrics.
	// Default: a new registry of the server's own.
	Registry *prometheus.Registry
	// MaxInFlight bounds the requests that may wait on the store at once
	// (decisions, resets and Routes; never /healthz, /readyz, Probes,
	// /metrics or /v1/rules). A decision over the bound is not sent to the
	// store: its rule's failure mode answers it (fail-open admits,
	// fail-closed answers 503 with the engine's retry delay), and a reset or
	// a Route answers 503 with that delay; each is counted in
	// floodgate_http_requests_shed_total. Default DefaultMaxInFlight.
	MaxInFlight int
	// Routes adds handlers to the API by ServeMux pattern (such as the Envoy
	// service's "POST /json"), under the in-flight bound, needing a token
	// with ScopeDecide when authentication is on, and a JSON body on POST.
	Routes map[string]http.Handler
	// Probes adds health probes by ServeMux pattern (such as the Envoy
	// service's "GET /healthcheck"), served as /healthz and /readyz are:
	// never authenticated, never under the in-flight bound, by Handler,
	// APIHandler and OpsHandler alike.
	Probes map[string]http.Handler
	// Tokens, if not nil, turns authentication on: every endpoint but
	// /healthz, /readyz and Probes needs "Authorization: Bearer TOKEN" with
	// a token of the right scope (401 without one, 403 with the wrong
	// scope).
	// SetTokens replaces them.
	Tokens *Tokens
	// Timeout, if positive, bounds each decision (decide.Options.Timeout).
	// Zero: the store's own per-call timeout is the one budget.
	Timeout time.Duration
	// UnavailableRetryAfter is the Retry-After of a 503 from a fail-closed
	// rule. Zero: decide.DefaultUnavailableRetryAfter.
	UnavailableRetryAfter time.Duration
	// Clock tells the time for X-RateLimit-Reset, log throttling, the
	// over-limit cache and the local fallback. Nil: the system clock.
	// Decisions take the store's time.
	Clock floodgate.Clock
	// OverLimitCache bounds the engine's over-limit cache, or turns it off
	// (decide.Options.OverLimitCache). The zero value: on, default bounds.
	OverLimitCache decide.CacheOptions
	// StoreAPI, if not nil, serves the store API (POST /v1/store/...) for
	// remote stores; see [StoreAPI]. Nil: off.
	StoreAPI *StoreAPI
	// TracerProvider, if set, traces each decision and store call
	// (decide.Options.TracerProvider), continuing a request's W3C
	// traceparent, and puts trace ids on the latency histograms as
	// exemplars. Nil: no tracing.
	TracerProvider trace.TracerProvider
}

// Server is the HTTP API. Create it with New; it is safe for concurrent use.
type Server struct {
	engine      *decide.Engine
	store       floodgate.Store
	now         func() time.Time // the Clock's Now, or time.Now
	registry    *prometheus.Registry
	metrics     *metrics
	policy      atomic.Pointer[policy]
	inFlight    chan struct{}
	routes      map[string]http.Handler
	probeRoutes map[string]http.Handler
	tokens      atomic.Pointer[Tokens]
	storeAPI    *storeAPI // nil: off
	logger      *slog.Logger
	failLog     *logthrottle.Logger // 503s' log lines
	traced      bool                // Options.TracerProvider is set
}

// New returns a server deciding with store under p. The error names the
// bad Policy field (a *ConfigError, several joined with errors.Join).
func New(store floodgate.Store, p Policy, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	now := time.Now
	if opts.Clock != nil {
		now = opts.Clock.Now
	}
	if store == nil {
		return nil, &ConfigError{Field: "store", Value: "<nil>", Reason: "is required"}
	}
	storeLatency := newStoreLatency()
	engine, err := decide.New(store, decide.Options{
		Timeout:               opts.Timeout,
		UnavailableRetryAfter: opts.UnavailableRetryAfter,
		Logger:                opts.Logger,
		Now:                   now,
		OverLimitCache:        opts.OverLimitCache,
		OnStoreCall: func(ctx context.Context, op string, took time.Duration) {
			tracing.Observe(storeLatency.WithLabelValues(op), trace.SpanContextFromContext(ctx), took.Seconds())
		},
		TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	pol, err := newPolicy(p)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registry, engine, storeLatency)
	if err != nil {
		return nil, err
	}
	if hr, ok := store.(health.Reporter); ok {
		if err := opts.Registry.Register(newHealthCollector(hr)); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	s := &Server{
		engine:      engine,
		store:       store,
		now:         now,
		registry:    opts.Registry,
		metrics:     m,
		inFlight:    make(chan struct{}, opts.MaxInFlight),
		routes:      opts.Routes,
		probeRoutes: opts.Probes,
		logger:      opts.Logger,
		failLog:     logthrottle.New(opts.Logger, failLogInterval, now),
		traced:      opts.TracerProvider != nil,
	}
	if opts.StoreAPI != nil {
		if s.storeAPI, err = newStoreAPI(opts.StoreAPI, store, m, engine.UnavailableRetryAfter()); err != nil {
			return nil, err
		}
		if opts.TracerProvider != nil {
			s.storeAPI.tracer = opts.TracerProvider.Tracer("github.com/floodgate-rl/floodgate/server")
		}
	}
	s.policy.Store(pol)
	s.SetTokens(opts.Tokens)
	return s, nil
}

// Close gives back to the store the quota the rules' leases hold
// (Rule.Lease), waiting until ctx ends; serve calls it on shutdown, after
// the last request. The server goes on deciding after Close, asking the
// store per request.
func (s *Server) Close(ctx context.Context) error { return s.engine.Close(ctx) }

// Reload replaces the policy with p; requests in flight finish under the
// one they started with. If p is invalid, the policy in force stays. The
// caller counts the attempt with CountReload, once, whatever else it
// reloads with it.
func (s *Server) Reload(p Policy) error {
	pol, err := newPolicy(p)
	if err != nil {
		return err
	}
	s.policy.Store(pol)
	return nil
}

// CountReload counts one reload attempt in floodgate_config_reloads_total,
// by result: ok, or error when any part of it failed (a file that does not
// parse, a policy Reload rejects, rules of another service).
func (s *Server) CountReload(ok bool) {
	result := "error"
	if ok {
		result = "ok"
	}
	s.metrics.reloads.WithLabelValues(result).Inc()
}

// checkRequest is the body of POST /v1/check and POST /v1/reset.
type checkRequest struct {
	Rule string  `json:"rule"`
	Key  *string `json:"key"`
	Cost *int64  `json:"cost"`
}

// CheckResponse is the body of a POST /v1/check answer.
type CheckResponse struct {
	Allowed   bool  `json:"allowed"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	// RetryAfterMs is, for a denial, the wait after which a retry of the
	// same cost is admitted, rounded up: never early.
	RetryAfterMs int64 `json:"retry_after_ms"`
	// ResetAfterMs is the time until the key is fully replenished, rounded
	// up, and for a sliding-window log at most its window
	// (frontend.Shown).
	ResetAfterMs int64  `json:"reset_after_ms"`
	Rule         string `json:"rule"`
	// Shadow is set when the rule is in shadow mode; ShadowDenied then
	// says the request would have been denied.
	Shadow       bool `json:"shadow,omitempty"`
	ShadowDenied bool `json:"shadow_denied,omitempty"`
	// StoreUnavailable is set when the store could not decide and the
	// rule's fail-open mode admitted the request. Remaining, RetryAfterMs
	// and ResetAfterMs are then unknown: zero here, left out of the JSON.
	StoreUnavailable bool `json:"store_unavailable,omitempty"`
	// LocalFallback is set when the store could not decide and this
	// instance decided alone, at the rule's local share (failure mode
	// local): Limit is the local limit.
	LocalFallback bool `json:"local_fallback,omitempty"`
}

// MarshalJSON leaves out of a fail-open answer (StoreUnavailable) the
// figures the store did not give: remaining, retry_after_ms and
// reset_after_ms.
func (r CheckResponse) MarshalJSON() ([]byte, error) {
	type plain CheckResponse
	if !r.StoreUnavailable {
		return json.Marshal(plain(r))
	}
	return json.Marshal(struct {
		Allowed          bool   `json:"allowed"`
		Limit            int64  `json:"limit"`
		Rule             string `json:"rule"`
		Shadow           bool   `json:"shadow,omitempty"`
		StoreUnavailable bool   `json:"store_unavailable"`
	}{r.Allowed, r.Limit, r.Rule, r.Shadow, true})
}

// NewCheckResponse is the POST /v1/check answer for a one-rule result of
// rule r that was admitted or denied (the engine's other verdicts are
// answered as problems). `floodgate check --json` prints the same.
func NewCheckResponse(r Rule, res *decide.Result) CheckResponse {
	o := &res.Outcomes[0]
	resp := CheckResponse{
		Allowed:          res.Allowed(),
		Limit:            r.Limit.Quota,
		Rule:             r.Name,
		Shadow:           r.Shadow,
		ShadowDenied:     r.Shadow && o.WouldDeny(),
		StoreUnavailable: o.Verdict == decide.Unavailable,
		LocalFallback:    o.Local,
	}
	if o.Decided {
		d := frontend.Shown(&res.Checks[0], o.Decision)
		resp.Limit, resp.Remaining = d.Limit, d.Remaining
		resp.RetryAfterMs, resp.ResetAfterMs = ceilMillis(d.RetryAfter), ceilMillis(d.ResetAfter)
	}
	return resp
}

// ceilMillis rounds a duration up to whole milliseconds, so a client that
// waits that long is never early: retry_after_ms, after which a retry of
// the same cost is admitted.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// decodeBody reads a JSON body strictly (see decodeStrict); on failure it
// has answered.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", MaxBodyBytes))
		} else {
			problem.Error(w, http.StatusBadRequest, "the body could not be read: "+err.Error())
		}
		return false
	}
	if err := decodeStrict(body, v); err != nil {
		problem.Error(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// ruleFor finds the named rule; on failure it has answered.
func (p *policy) ruleFor(w http.ResponseWriter, name string) (*rule, bool) {
	if name == "" {
		problem.Error(w, http.StatusBadRequest, `"rule" is required`)
		return nil, false
	}
	r, ok := p.rules[name]
	if !ok {
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Title: "Unknown rule",
			Detail: fmt.Sprintf("no rule named %q; GET /v1/rules lists them", echoName(name))})
		return nil, false
	}
	return r, true
}

// readRuleAndKey decodes a {"rule","key",...} body and finds the rule under
// the policy in force; on failure it has answered.
func (s *Server) readRuleAndKey(w http.ResponseWriter, r *http.Request) (*policy, *rule, checkRequest, bool) {
	var req checkRequest
	if !decodeBody(w, r, &req) {
		return nil, nil, req, false
	}
	p := s.policy.Load()
	rl, ok := p.ruleFor(w, req.Rule)
	if !ok {
		return nil, nil, req, false
	}
	switch {
	case req.Key == nil:
		problem.Error(w, http.StatusBadRequest, `"key" is required`)
		return nil, nil, req, false
	case *req.Key == "":
		problem.Error(w, http.StatusBadRequest, `"key" is empty: an empty key would be one counter shared by every caller; send the key to limit, such as a client's address or an API key`)
		return nil, nil, req, false
	}
	return p, rl, req, true
}

// maxEchoedName is the most of an unknown rule's name a 404 repeats: a
// rule's name is at most 64 bytes, and a caller's mistaken one is echoed
// no longer.
const maxEchoedName = 64

// echoName returns name cut to its first maxEchoedName bytes (at a UTF-8
// boundary) with "…" after them, or name itself if it is no longer.
func echoName(name string) string {
	if len(name) <= maxEchoedName {
		return name
	}
	cut := maxEchoedName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "…"
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request, shed error) {
	p, rl, req, ok := s.readRuleAndKey(w, r)
	if !ok {
		return
	}
	cost := int64(1)
	if req.Cost != nil {
		// Zero would mean 1 to the engine; the API asks for an explicit cost.
		if cost = *req.Cost; cost < 1 {
			problem.Error(w, http.StatusBadRequest, fmt.Sprintf("cost %d must be between 1 and the rule's limit %d", cost, rl.Limit.Quota))
			return
		}
	}
	var q oneCheck
	res := s.decide(r.Context(), &q, rl, *req.Key, cost, shed)
	if !s.answerFailure(w, r, rl, &res) {
		return
	}
	resp := NewCheckResponse(rl.Rule, &res)
	p.writeHeaders(w.Header(), rl, &res, s.now())
	writeJSON(w, CheckStatus(&res), resp)
}

// decide decides one request under rl through the engine and counts it.
// With shed set (ErrOverloaded) the store is not asked: the rule's failure
// mode decides.
func (s *Server) decide(ctx context.Context, q *oneCheck, rl *rule, key string, cost int64, shed error) decide.Result {
	q.checks[0] = rl.check(key, cost)
	q.checks[0].Err = shed
	start := time.Now()
	res := s.engine.DecideInto(ctx, q.checks[:], q.outcomes[:])
	tracing.Observe(s.metrics.decisionDuration, res.SpanContext, time.Since(start).Seconds())
	s.metrics.count(&res)
	return res
}

// oneCheck holds a one-rule request's check and outcome where its handler
// keeps them (on its stack): the Result points at both.
type oneCheck struct {
	checks   [1]decide.Check
	outcomes [1]decide.Outcome
}

// CheckStatus returns the HTTP status of POST /v1/check's answer to a
// request decided as res: 200 admitted (a fail-open rule the store could
// not decide included), 429 denied, 503 for a fail-closed rule the store
// could not decide, 400 for input the engine rejects, 500 for any other
// store error. `floodgate check` answers by it too.
func CheckStatus(res *decide.Result) int {
	switch res.Verdict {
	case decide.Admitted:
		return http.StatusOK
	case decide.Denied:
		return http.StatusTooManyRequests
	case decide.Unavailable:
		return http.StatusServiceUnavailable
	case decide.Invalid:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// answerFailure answers a request the engine did not decide
// ([CheckStatus]'s 503, 400 and 500). It reports whether the request was
// decided (admitted, denied, or admitted by a fail-open rule) and is
// still to be answered.
func (s *Server) answerFailure(w http.ResponseWriter, r *http.Request, rl *rule, res *decide.Result) bool {
	switch CheckStatus(res) {
	case http.StatusOK, http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		frontend.WriteUnavailable(w.Header(), res)
		why, kind := "the rate-limit store is unavailable", problem.KindStoreUnavailable
		if errors.Is(res.Err(), ErrOverloaded) {
			why, kind = "the server is at its limit of concurrent requests", problem.KindOverloaded
		}
		s.fail(w, r, http.StatusServiceUnavailable, kind, fmt.Sprintf("%s and rule %q fails closed; retry after the number of seconds in Retry-After", why, rl.Name), res.Err())
	case http.StatusBadRequest:
		problem.Error(w, http.StatusBadRequest, res.Err().Error())
	default:
		s.fail(w, r, http.StatusInternalServerError, problem.KindStoreError, fmt.Sprintf("the rate-limit store failed for rule %q; the request was not decided (the server's log has the error under the request id)", rl.Name), res.Err())
	}
	return false
}

// writeHeaders sets the rate-limit headers of a decided one-rule request as
// the middleware does: the rule's RateLimit-Policy and, when it decided,
// the RateLimit and X-RateLimit-* fields, with Retry-After when it denied.
// A shadow rule never appears in them.
func (p *policy) writeHeaders(h http.Header, rl *rule, res *decide.Result, now time.Time) {
	policies := [1]*ratelimitheader.Policy{&rl.policy}
	frontend.WriteHeaders(h, p.headers, now, policies[:], res)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		problem.Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request, shed error) {
	_, rl, req, ok := s.readRuleAndKey(w, r)
	if !ok {
		return
	}
	if req.Cost != nil {
		problem.Error(w, http.StatusBadRequest, `"cost" does not apply to a reset`)
		return
	}
	if shed != nil {
		s.overloaded(w, r)
		return
	}
	err := s.engine.Reset(r.Context(), rl.keys.Key(*req.Key), rl.Limit)
	if err != nil {
		status, kind, detail := http.StatusInternalServerError, problem.KindStoreError, fmt.Sprintf("the rate-limit store failed; rule %q's key was not reset (the server's log has the error under the request id)", rl.Name)
		if storeerr.Outage(err) {
			status, kind, detail = http.StatusServiceUnavailable, problem.KindStoreUnavailable, fmt.Sprintf("the rate-limit store is unavailable; rule %q's key was not reset; retry after the number of seconds in Retry-After", rl.Name)
			w.Header()[ratelimitheader.HeaderRetryAfter] = []string{ratelimitheader.RetryAfter(s.engine.UnavailableRetryAfter())}
		}
		s.fail(w, r, status, kind, detail, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"reset": true, "rule": rl.Name})
}

// RuleInfo describes one rule in GET /v1/rules.
type RuleInfo struct {
	Name        string `json:"name"`
	Algorithm   string `json:"algorithm"`
	Limit       int64  `json:"limit"`
	WindowMs    int64  `json:"window_ms"`
	Refill      int64  `json:"refill,omitempty"`
	FailureMode string `json:"failure_mode"`
	// LocalShare is the rule's local share under failure mode local.
	LocalShare  float64 `json:"local_share,omitempty"`
	Shadow      bool    `json:"shadow"`
	Description string  `json:"description"`
}

func (s *Server) handleRules(w http.ResponseWriter, _ *http.Request, _ error) {
	p := s.policy.Load()
	out := struct {
		Rules []RuleInfo `json:"rules"`
	}{Rules: []RuleInfo{}}
	for _, rl := range p.ordered {
		info := RuleInfo{
			Name: rl.Name, Algorithm: rl.Limit.Algorithm.String(), Limit: rl.Limit.Quota,
			WindowMs: rl.Limit.Window.Milliseconds(), FailureMode: rl.Failure.String(), Shadow: rl.Shadow,
			LocalShare:  rl.LocalShare,
			Description: rl.Description,
		}
		if rl.Limit.Algorithm == floodgate.TokenBucket {
			info.Refill = fixedpoint.Refill(rl.Limit.Quota, rl.Limit.Refill)
		}
		out.Rules = append(out.Rules, info)
	}
	sort.Slice(out.Rules, func(i, j int) bool { return out.Rules[i].Name < out.Rules[j].Name })
	writeJSON(w, http.StatusOK, out)
}
