// Package httplimit is floodgate's net/http middleware: it applies rate-limit
// rules to requests before they reach a handler, over any [floodgate.Store].
//
//	lim, err := httplimit.New(httplimit.Config{
//		Store: memory.New(),
//		Rules: []httplimit.Rule{
//			{Name: "per-ip", Limit: floodgate.PerMinute(100)},
//			{Name: "per-key", Limit: floodgate.PerHour(1000), Key: httplimit.Header("X-API-Key")},
//		},
//	})
//	...
//	http.ListenAndServe(addr, lim.Handler(mux))
//
// # Rules
//
// Each [Rule] names a limit, the requests it applies to (methods and
// net/http ServeMux path patterns) and how to key them (the client's
// address by default; a header, a request-context value or a combination).
// A request passes only if every rule that applies to it allows it. The
// rules are decided together, all or nothing (in one store call when the
// store is a [floodgate.BatchStore]), so a denied request uses up no quota
// anywhere.
//
// # Responses
//
// Responses carry the IETF draft RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11, Structured Fields) and the
// common X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset; see
// [HeaderMode]. A denied request gets 429 Too Many Requests, Retry-After in
// whole seconds and an RFC 9457 problem (application/problem+json) of type
// quota-exceeded listing the violated policy, unless a [Config.DenyHandler]
// answers instead.
//
// # Failures
//
// When the store is unavailable, the decision's deadline passes or a rule's
// key cannot be found, the rule's [FailureMode] decides: FailOpen lets the
// request through, FailClosed answers 503 Service Unavailable with
// Retry-After, and FailLocal keeps limiting in this process alone, at
// [Rule.LocalShare] of the limit, with a Floodgate-Fallback: local header.
// Any other store error (a bad script reply) never lets the request
// through: it is answered 500, or by [Config.ErrorHandler]. Every failure
// is counted ([Limiter.Stats]), reported to [Config.OnStoreError] and
// logged at most once per [Config.LogInterval].
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/tracing"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"
)

// Defaults for the zero fields of a Config.
const (
	// DefaultUnavailableRetryAfter is the Retry-After of a 503 answered
	// because a fail-closed rule could not decide.
	DefaultUnavailableRetryAfter = decide.DefaultUnavailableRetryAfter
	// DefaultLogInterval is the least time between two log lines about
	// failures.
	DefaultLogInterval = decide.DefaultLogInterval
)

// FailureMode says what a rule does when it cannot decide: the store is
// unavailable (floodgate.ErrStoreUnavailable) or the decision's deadline
// passed, or its key function returned an error. It is decide.FailureMode,
// the one vocabulary every front end shares. A store error that is not an
// outage (a bad script reply) never admits, whatever the mode.
type FailureMode = decide.FailureMode

const (
	// FailOpen lets the request through as if the rule did not exist (the
	// zero value): availability first, for public APIs.
	FailOpen = decide.FailOpen
	// FailClosed answers 503 Service Unavailable with Retry-After: for
	// routes where an unlimited client is worse than an outage, such as
	// login or payment endpoints.
	FailClosed = decide.FailClosed
	// FailLocal keeps limiting while the store is unavailable: this
	// process decides the rule alone, in memory, at Rule.LocalShare of its
	// limit, and adds Floodgate-Fallback: local to the response.
	FailLocal = decide.FailLocal
)

// Rule is one rate limit and the requests it applies to.
type Rule struct {
	// Name identifies the rule in response headers, problem details, logs
	// and store keys. Required, unique within a Config: 1-64 letters,
	// digits, '_', '.' or '-', starting with a letter or digit.
	Name string
	// Limit is the rate limit, as a valid [floodgate.Limit].
	Limit floodgate.Limit
	// Methods lists the request methods the rule applies to, such as
	// "POST". Empty: every method. "GET" also matches HEAD, as in ServeMux.
	Methods []string
	// Paths lists net/http ServeMux patterns ("/api/", "/login",
	// "GET /users/{id}", "api.example.com/"): the rule applies to a request
	// that any of them would route, with ServeMux's rules for trailing
	// slashes, wildcards, methods and hosts. Paths are matched after
	// ServeMux's cleaning, so "/api/../login" matches "/login". Empty: every
	// path. A path pattern starts with '/': ServeMux reads "api/" as the
	// host "api", so New refuses a host without a dot (but localhost) or
	// with a port, which would never match.
	Paths []string
	// Key returns the key the rule counts the request under. Nil: the
	// client's address, from Config.ClientIP. See [KeyFunc].
	Key KeyFunc
	// Failure says what to do when the rule cannot decide.
	Failure FailureMode
	// LocalShare is the share of Limit this process enforces alone under
	// FailLocal while the store is unavailable: above 0 and at most 1, 1/N
	// when N processes share the store (docs/RESILIENCE.md says what a
	// share is for each algorithm). Zero: the whole limit.
	LocalShare float64
	// NoCache keeps the rule out of the over-limit cache, which otherwise
	// answers a key over its limit from memory until the store's retry
	// delay has passed: every denied request then asks the store.
	NoCache bool
	// Lease, if set, decides the rule from quota this instance leases from
	// the store in blocks, at memory speed, instead of asking the store per
	// request (decide.LeaseOptions; the zero value is the defaults): a
	// token bucket or a fixed window only. Close gives the leases back.
	Lease *decide.LeaseOptions
	// Shadow makes the rule decide and report (Stats.ShadowDenied,
	// Config.OnShadowDeny) but never deny: for trying a limit out on real
	// traffic. A shadow rule that cannot decide always fails open, and it
	// does not appear in response headers.
	Shadow bool
}

// Denial describes a request that a rule denied, for a DenyHandler.
type Denial struct {
	// Rule is the name of the rule that denied the request.
	Rule string
	// Limit is that rule's limit, or, when Local, the share of it this
	// instance enforced alone.
	Limit floodgate.Limit
	// Decision is the store's decision; Decision.RetryAfter says when a
	// retry would be admitted.
	Decision floodgate.Decision
	// Local reports that the store was unavailable and this instance
	// denied alone, under FailLocal.
	Local bool
}

// RetryAfterSeconds returns d.Decision.RetryAfter in whole seconds as the
// Retry-After header states it: rounded up, and never below 1.
func (d Denial) RetryAfterSeconds() int64 {
	return ratelimitheader.RetryAfterSeconds(d.Decision.RetryAfter)
}

// Config configures a Limiter. Store and Rules are required; every other
// zero field has a documented default.
type Config struct {
	// Store decides the limits; required.
	Store floodgate.Store
	// Rules are the limits, checked in order; at least one.
	Rules []Rule
	// ClientIP finds the client's address for rules keyed by it. Nil: a
	// clientip.Resolver zero value, which trusts no proxy (the key is the
	// connection's peer) and groups IPv6 by /64.
	ClientIP *clientip.Extractor
	// KeyPrefix is put before every store key, so several Limiters (or
	// applications) can share one store. Store keys are the prefix, the
	// rule's name escaped, '|' and the key (its SHA-256 when over 256
	// bytes). It must not hold '{' or '}', which would put every key on one
	// Redis Cluster node.
	KeyPrefix string
	// Headers selects the rate-limit response headers; the zero value sends
	// both the IETF and the X-RateLimit ones.
	Headers HeaderMode
	// Timeout, if positive, bounds each request's whole decision: its rules'
	// store calls share this one deadline, and passing it counts as the
	// store being unavailable. Zero: no deadline beyond the request's own
	// and the store's. Negative is an error, and so is one at or above the
	// store's own per-call timeout when the store says it (a method
	// Timeout() time.Duration: redisstore's, 50ms by default, and
	// remotestore's, 100ms), which would end every call first. A call that
	// times out may still have been counted by the store; it is not
	// refunded.
	Timeout time.Duration
	// UnavailableRetryAfter is the Retry-After of a 503 from a fail-closed
	// rule. Zero: DefaultUnavailableRetryAfter. Rounded up to whole seconds.
	UnavailableRetryAfter time.Duration
	// Skip, if set, exempts the requests for which it returns true (health
	// checks, metrics scrapes): they pass with no rule checked and no
	// headers added.
	Skip func(*http.Request) bool
	// DenyHandler, if set, answers denied requests instead of the default
	// 429 problem. When it runs, the rate-limit headers and Retry-After are
	// already set on w; it writes the status and body.
	DenyHandler func(w http.ResponseWriter, r *http.Request, d Denial)
	// ErrorHandler, if set, answers requests that a store error which is not
	// an outage keeps from being decided (a bad script reply, a
	// misconfiguration: err wraps the store's error). Such requests are never
	// let through, whatever the rule's FailureMode. Nil: 500 Internal Server
	// Error with an application/problem+json body.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)
	// OnStoreError, if set, is called for every failure: a store call that
	// failed or timed out (err wraps the store's error, often
	// floodgate.ErrStoreUnavailable or context.DeadlineExceeded), a refund
	// that failed, or a key function's error (err matches ErrKey). It runs on
	// the request's goroutine and must be quick and safe for concurrent use:
	// increment a metric.
	OnStoreError func(r *http.Request, rule string, err error)
	// OnShadowDeny, if set, is called when a shadow rule would have denied
	// a request. Same constraints as OnStoreError.
	OnShadowDeny func(r *http.Request, rule string, d floodgate.Decision)
	// Logger receives a warning about failures, at most one line per
	// LogInterval, counting the failures it did not log. Nil:
	// slog.Default().
	Logger *slog.Logger
	// LogInterval is the least time between two failure log lines. Zero:
	// DefaultLogInterval.
	LogInterval time.Duration
	// Clock tells the time for X-RateLimit-Reset (an absolute time), log
	// throttling, the over-limit cache and the local fallback. Nil: the
	// system clock. Decisions take the store's time.
	Clock floodgate.Clock
	// OverLimitCache bounds the over-limit cache, or turns it off
	// (decide.Options.OverLimitCache). The zero value: on, default bounds.
	OverLimitCache decide.CacheOptions
	// TracerProvider, if set, traces each decision and store call
	// (decide.Options.TracerProvider), under the span the request's
	// context holds, else the W3C traceparent the request carries. Nil: no
	// tracing.
	TracerProvider trace.TracerProvider
}

// ErrKey marks a key function's failure, as passed to OnStoreError.
var ErrKey = errors.New("httplimit: no key for the request")

// ConfigError reports a bad Config field, naming the field (such as
// "Rules[1].Name") and its value: the error of New. Its Error begins with
// "httplimit: ".
type ConfigError struct {
	Field  string // such as "Rules[1].Name"
	Value  string // the bad value, formatted
	Reason string // why it cannot be used
	// Err is the underlying error, if any. For a rule's Limit it wraps the
	// *floodgate.LimitError: errors.Is(err, floodgate.ErrInvalidLimit)
	// holds.
	Err error
}

// Error returns "httplimit: ", the field, its value and the reason.
func (e *ConfigError) Error() string { return "httplimit: " + e.Field + " " + e.Value + " " + e.Reason }

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// Stats counts what a Limiter has done since it was created.
type Stats struct {
	// Denied counts requests answered 429 (or by the DenyHandler).
	Denied uint64
	// ShadowDenied counts shadow-rule decisions that would have denied.
	ShadowDenied uint64
	// Unavailable counts requests answered 503 by a fail-closed rule.
	Unavailable uint64
	// StoreErrors counts store calls that failed or timed out, refunds
	// included.
	StoreErrors uint64
	// KeyErrors counts key functions that returned an error.
	KeyErrors uint64
	// LocalFallback counts requests a FailLocal rule decided in this
	// process because the store was unavailable.
	LocalFallback uint64
	// CacheHits counts rule checks denied from the over-limit cache,
	// without asking the store.
	CacheHits uint64
}

// Limiter is the middleware. Create it with New; it is safe for concurrent
// use, and holds no goroutines or resources.
type Limiter struct {
	front   frontend.Front // the engine, the clock and the rules' checks
	rules   []rule         // the HTTP side of front.Rules, in their order
	headers HeaderMode
	skip    func(*http.Request) bool
	deny    func(http.ResponseWriter, *http.Request, Denial)
	onError func(http.ResponseWriter, *http.Request, error)
	report  *frontend.Reporter[*http.Request] // the counters and hooks
	traced  bool                              // Config.TracerProvider is set
}

// New checks cfg and returns its Limiter. The error is a *ConfigError naming
// the first bad field; no duration or cache bound may be negative.
func New(cfg Config) (*Limiter, error) {
	lib := make([]frontend.Rule, len(cfg.Rules))
	for i, r := range cfg.Rules {
		lib[i] = frontend.Rule{Name: r.Name, Limit: r.Limit, Failure: r.Failure, LocalShare: r.LocalShare, NoCache: r.NoCache, Shadow: r.Shadow, Lease: r.Lease}
	}
	front, err := frontend.New(frontend.Library{Store: cfg.Store, Clock: cfg.Clock, Rules: lib, KeyPrefix: cfg.KeyPrefix,
		Options: decide.Options{Timeout: cfg.Timeout, UnavailableRetryAfter: cfg.UnavailableRetryAfter, Logger: cfg.Logger,
			LogInterval: cfg.LogInterval, OverLimitCache: cfg.OverLimitCache, TracerProvider: cfg.TracerProvider}})
	if err != nil {
		field, value, reason, err := frontend.ErrorFields(err)
		return nil, &ConfigError{Field: field, Value: value, Reason: reason, Err: err}
	}
	if !cfg.Headers.Valid() {
		return nil, &ConfigError{Field: "Headers", Value: cfg.Headers.String(), Reason: "is not a HeaderMode"}
	}
	l := &Limiter{
		front:   front,
		traced:  cfg.TracerProvider != nil,
		headers: cfg.Headers,
		skip:    cfg.Skip,
		deny:    cfg.DenyHandler,
		onError: cfg.ErrorHandler,
		report:  frontend.NewReporter("httplimit", cfg.OnStoreError, cfg.OnShadowDeny),
	}
	clientKey := ClientIP(cfg.ClientIP)
	for i, r := range cfg.Rules {
		cr, err := compileRule(i, r, clientKey)
		if err != nil {
			return nil, err
		}
		l.rules = append(l.rules, cr)
	}
	return l, nil
}

// Close gives back to the store the quota the rules' leases hold
// (Rule.Lease), waiting for that until ctx ends. The Limiter goes on
// deciding after Close, asking the store per request. Without leases it
// has nothing to do. Safe for concurrent use.
func (l *Limiter) Close(ctx context.Context) error { return l.front.Engine.Close(ctx) }

// Stats returns the Limiter's counters.
func (l *Limiter) Stats() Stats {
	// Stats has Counts' fields, in its order: a conversion, checked by
	// the compiler.
	return Stats(frontend.CountsOf(&l.front, l.report))
}

// Handler returns next behind the Limiter's rules. Its method value,
// lim.Handler, is the func(http.Handler) http.Handler that routers such as
// chi and gorilla/mux take as middleware.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.skip != nil && l.skip(r) {
			next.ServeHTTP(w, r)
			return
		}
		if l.check(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// check applies the rules to r through the engine. It returns true to pass
// the request on, having set the rate-limit headers; otherwise it has
// answered r.
func (l *Limiter) check(w http.ResponseWriter, r *http.Request) bool {
	var q frontend.Request
	ctx := r.Context()
	if l.traced {
		ctx = tracing.FromHeader(ctx, r.Header)
	}
	d := l.front.Decide(ctx, &q, ErrKey,
		func(i int) bool { return l.rules[i].matches(r) },
		func(i int) (string, error) { return l.rules[i].key(r) })
	res := &d.Result
	l.report.Report(r, r.Context().Err() != nil, res)
	switch res.Verdict {
	case decide.Admitted:
		frontend.WriteHeaders(w.Header(), l.headers, l.front.Now(), d.Policies, res)
		return true
	case decide.Denied:
		frontend.WriteHeaders(w.Header(), l.headers, l.front.Now(), d.Policies, res)
		ru := &l.rules[d.Rules[res.Deciding]]
		o := &res.Outcomes[res.Deciding]
		// Denied by this instance alone (Local): against its share of the limit.
		dn := Denial{Rule: ru.name, Limit: o.Limit, Decision: o.Decision, Local: o.Local}
		switch {
		case l.deny != nil:
			l.deny(w, r, dn)
		case dn.Local:
			ru.writeLocalProblem(w, dn.Limit)
		default:
			ru.writeProblem(w)
		}
	case decide.Unavailable:
		writeUnavailable(w, res)
	default: // StoreError, or Invalid, which a validated rule of cost 1 cannot be
		if l.onError != nil {
			l.onError(w, r, res.Err())
		} else {
			w.Header()["Cache-Control"] = []string{"no-store"}
			problem.Error(w, http.StatusInternalServerError, "The rate-limit store failed; the request was not let through.")
		}
	}
	return false
}

// rule is a Rule checked and prepared for serving.
type rule struct {
	name    string
	methods []string
	mux     *http.ServeMux // nil: every path
	key     KeyFunc
	problem []byte // the default 429 body
}

// compileRule prepares rule i, r, for serving: its methods, paths, key and
// 429 body; frontend.New checked the rest.
func compileRule(i int, r Rule, clientKey KeyFunc) (rule, error) {
	field := func(f string) string { return fmt.Sprintf("Rules[%d].%s", i, f) }
	cr := rule{
		name: r.Name,
		key:  r.Key,
	}
	for j, m := range r.Methods {
		if m == "" || !httpguts.ValidHeaderFieldName(m) {
			return rule{}, &ConfigError{Field: field(fmt.Sprintf("Methods[%d]", j)), Value: fmt.Sprintf("%q", m), Reason: "is not an HTTP method"}
		}
		cr.methods = append(cr.methods, m)
	}
	if len(r.Paths) > 0 {
		cr.mux = http.NewServeMux()
		for j, p := range r.Paths {
			if reason := hostMistake(p); reason != "" {
				return rule{}, &ConfigError{Field: field(fmt.Sprintf("Paths[%d]", j)), Value: fmt.Sprintf("%q", p), Reason: reason}
			}
			if err := register(cr.mux, p); err != nil {
				return rule{}, &ConfigError{Field: field(fmt.Sprintf("Paths[%d]", j)), Value: fmt.Sprintf("%q", p), Reason: "is not a valid ServeMux pattern: " + err.Error()}
			}
		}
	}
	if cr.key == nil {
		cr.key = clientKey
	}
	cr.problem = quotaProblem(r.Name, r.Limit)
	return cr, nil
}

// hostMistake reports why pattern, which ServeMux reads as
// "[METHOD ][HOST]/[PATH]", has a host part that would never match as
// meant: a path without its leading '/' ("api/" is host "api"), or a host
// with a port (ServeMux matches the request's host without it). "" for a
// pattern without a host, or with a host name that has a dot, localhost
// or an IPv6 literal.
func hostMistake(pattern string) string {
	method, rest := "", pattern
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		method, rest = pattern[:i+1], strings.TrimLeft(pattern[i+1:], " \t")
	}
	host, _, ok := strings.Cut(rest, "/")
	switch {
	case !ok || host == "" || strings.HasPrefix(host, "["):
		return "" // no host (ServeMux refuses a pattern without '/')
	case strings.Contains(host, ":"):
		return fmt.Sprintf("has a host with a port (%q), which never matches: ServeMux matches the request's host without its port; drop the port", host)
	case !strings.Contains(host, ".") && host != "localhost":
		return fmt.Sprintf("is a host pattern (host %q), so it never matches a path: a path pattern starts with '/' (%q); a host pattern names a host with a dot, such as %q",
			host, method+"/"+rest, method+host+".example.com/"+strings.TrimPrefix(rest, host+"/"))
	}
	return ""
}

// register adds pattern to mux, turning ServeMux's panic on a bad or
// conflicting pattern into an error.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// matches reports whether the rule applies to r by method and path.
func (ru *rule) matches(r *http.Request) bool {
	if len(ru.methods) > 0 {
		ok := false
		for _, m := range ru.methods {
			if m == r.Method || m == http.MethodGet && r.Method == http.MethodHead {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if ru.mux != nil {
		if _, pattern := ru.mux.Handler(r); pattern == "" {
			return false
		}
	}
	return true
}
