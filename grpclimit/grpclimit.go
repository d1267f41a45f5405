// Package grpclimit is floodgate's gRPC server interceptors: rate-limit
// rules applied to unary calls and streams before they reach a handler, over
// any [floodgate.Store].
//
//	lim, err := grpclimit.New(grpclimit.Config{
//		Store: memory.New(),
//		Rules: []grpclimit.Rule{
//			{Name: "per-peer", Limit: floodgate.PerMinute(600)},
//			{Name: "per-tenant", Limit: floodgate.PerHour(10000), Key: grpclimit.Metadata("x-tenant")},
//			{Name: "search", Limit: floodgate.PerSecond(5), Methods: []string{"/shop.Catalog/Search"}},
//		},
//	})
//	...
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary), grpc.ChainStreamInterceptor(lim.Stream))
//
// # Rules
//
// Each [Rule] names a limit, the methods it applies to (full method names
// or whole services) and how to key a call: the peer's address by default
// (with the x-forwarded-for metadata believed only from trusted proxies, and
// IPv6 grouped by prefix, as package clientip does for HTTP), a metadata
// value, the verified client certificate's identity, an identity an
// authentication interceptor put in the context, or a combination. A call
// passes only if every rule that applies allows it; the rules are decided
// together, all or nothing. A stream is checked when it starts, and a rule
// with a MessageCost counts the messages the server receives on it
// instead, each checked as it arrives. The health and reflection services
// are skipped unless Config.Skip says otherwise ([SkipNone] limits them
// too).
//
// # Answers
//
// A denied call ends with codes.ResourceExhausted and two details: a
// google.rpc.RetryInfo whose retry_delay is the exact time until a retry of
// the same call would be admitted, and a google.rpc.QuotaFailure naming the
// rule. When a fail-closed rule cannot decide (the store is unavailable),
// the call ends with codes.Unavailable and a RetryInfo; a store error that
// is not an outage ends it with codes.Internal, never admitting it. Every
// decided call carries the rate-limit metadata: ratelimit-policy,
// ratelimit, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset
// (and retry-after on a denial), with the values of the HTTP middleware's
// headers; in the response header of an admitted call, in the trailer of a
// rejected one.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/tracing"
)

// FailureMode says what a rule does when it cannot decide: the store is
// unavailable or the decision's deadline passed, or its key function
// failed. It is decide.FailureMode, the vocabulary every front end shares.
type FailureMode = decide.FailureMode

const (
	// FailOpen lets the call through as if the rule did not exist (the
	// zero value).
	FailOpen = decide.FailOpen
	// FailClosed ends the call with codes.Unavailable and a RetryInfo.
	FailClosed = decide.FailClosed
	// FailLocal keeps limiting while the store is unavailable: this
	// process decides the rule alone, in memory, at Rule.LocalShare of its
	// limit (docs/RESILIENCE.md).
	FailLocal = decide.FailLocal
)

// HeaderMode selects the rate-limit metadata, as httplimit.HeaderMode
// selects the headers: the IETF ratelimit and ratelimit-policy, the
// x-ratelimit-* ones, both (the zero value) or none. A denied call gets
// retry-after whatever the mode.
type HeaderMode = ratelimitheader.Mode

const (
	// HeadersBoth sends the IETF and the x-ratelimit-* metadata (the zero
	// value).
	HeadersBoth = ratelimitheader.Both
	// HeadersIETF sends ratelimit-policy and ratelimit, with the values of
	// httplimit.HeadersIETF's RateLimit-Policy and RateLimit headers.
	HeadersIETF = ratelimitheader.IETF
	// HeadersLegacy sends x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset (Unix epoch seconds), for the most restrictive rule.
	HeadersLegacy = ratelimitheader.Legacy
	// HeadersNone sends no rate-limit metadata but a denial's retry-after
	// and grpc-retry-pushback-ms.
	HeadersNone = ratelimitheader.None
)

// Rule is one rate limit and the calls it applies to.
type Rule struct {
	// Name identifies the rule in metadata, status details, logs and store
	// keys. Required, unique within a Config: 1-64 letters, digits, '_',
	// '.' or '-', starting with a letter or digit.
	Name string
	// Limit is the rate limit, as a valid [floodgate.Limit].
	Limit floodgate.Limit
	// Methods lists the calls the rule applies to: full method names
	// ("/shop.Catalog/Search") or whole services ("/shop.Catalog/*").
	// Empty: every call.
	Methods []string
	// Key returns the key the rule counts a call under. Nil: the peer's
	// address, from Config.ClientIP. See [KeyFunc].
	Key KeyFunc
	// MessageCost, if positive, makes the rule count the messages the
	// server receives on a stream, each of this cost, checked as it
	// arrives, instead of the stream's start; a unary call's one request
	// message is checked before the handler runs. Zero: the rule counts
	// calls, each of cost 1. At most the limit's quota.
	MessageCost int64
	// Failure says what to do when the rule cannot decide.
	Failure FailureMode
	// LocalShare is the share of Limit this process enforces alone under
	// FailLocal while the store is unavailable: above 0 and at most 1, 1/N
	// when N processes share the store (docs/RESILIENCE.md says what a
	// share is for each algorithm). Zero: the whole limit.
	LocalShare float64
	// NoCache keeps the rule out of the over-limit cache, which otherwise
	// answers a key over its limit from memory until the store's retry
	// delay has passed: every denied call then asks the store.
	NoCache bool
	// Lease, if set, decides the rule from quota this instance leases from
	// the store in blocks, at memory speed, instead of asking the store per
	// request (decide.LeaseOptions; the zero value is the defaults): a
	// token bucket or a fixed window only. Close gives the leases back.
	Lease *decide.LeaseOptions
	// Shadow makes the rule decide and report (Config.OnShadowDeny,
	// Stats.ShadowDenied) but never deny. A shadow rule that cannot decide
	// fails open, and it never appears in the metadata.
	Shadow bool
}

// Config configures a Limiter. Store and Rules are required; every other
// zero field has a documented default.
type Config struct {
	// Store decides the limits; required.
	Store floodgate.Store
	// Rules are the limits, checked in order; at least one.
	Rules []Rule
	// ClientIP finds the peer's address for rules keyed by it. Nil: a
	// clientip.Resolver zero value, which trusts no proxy (the key is the
	// connection's peer) and groups IPv6 by /64.
	ClientIP *clientip.Extractor
	// KeyPrefix is put before every store key, so several Limiters (or
	// applications) can share one store, as httplimit.Config.KeyPrefix. It
	// must not hold '{' or '}'.
	KeyPrefix string
	// Headers selects the rate-limit metadata; the zero value sends both
	// the IETF and the x-ratelimit-* fields.
	Headers HeaderMode
	// OverLimitCache bounds the over-limit cache, or turns it off
	// (decide.Options.OverLimitCache). The zero value: on, default bounds.
	OverLimitCache decide.CacheOptions
	// TracerProvider, if set, traces each decision and store call
	// (decide.Options.TracerProvider), under the span the request's
	// context holds, else the W3C traceparent the request carries. Nil: no
	// tracing.
	TracerProvider trace.TracerProvider
	// Timeout, if positive, bounds each call's decision; passing it is an
	// outage. Zero: the store's own per-call timeout is the one budget.
	// Negative is an error, and so is one at or above the store's own
	// per-call timeout, as httplimit.Config.Timeout says.
	Timeout time.Duration
	// UnavailableRetryAfter is the RetryInfo delay of a call that a
	// fail-closed rule could not decide. Zero:
	// decide.DefaultUnavailableRetryAfter.
	UnavailableRetryAfter time.Duration
	// Skip, if set, exempts the calls for which it returns true: they pass
	// with no rule checked and no metadata added. Nil:
	// [SkipHealthAndReflection]; [SkipNone] limits every call, the health
	// service's too.
	Skip func(ctx context.Context, fullMethod string) bool
	// OnStoreError, if set, is called for every failure: a store call that
	// failed or timed out, a refund that failed, or a key function's error
	// (err matches ErrKey). It must be quick and safe for concurrent use.
	OnStoreError func(ctx context.Context, rule string, err error)
	// OnShadowDeny, if set, is called when a shadow rule would have denied
	// a call. Same constraints as OnStoreError.
	OnShadowDeny func(ctx context.Context, rule string, d floodgate.Decision)
	// Logger receives a warning about failures, at most one line per
	// LogInterval. Nil: slog.Default().
	Logger *slog.Logger
	// LogInterval is the least time between two failure log lines. Zero:
	// decide.DefaultLogInterval.
	LogInterval time.Duration
	// Clock tells the time for x-ratelimit-reset and log throttling. Nil:
	// the system clock. Decisions take the store's time.
	Clock floodgate.Clock
}

// SkipHealthAndReflection reports whether fullMethod belongs to the gRPC
// health service (grpc.health.v1.Health) or to server reflection
// (grpc.reflection.v1 and v1alpha): the calls a Limiter skips when
// Config.Skip is nil.
func SkipHealthAndReflection(_ context.Context, fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1alpha.ServerReflection/")
}

// SkipNone skips no call: as Config.Skip, it puts the health service and
// server reflection under the rules like every other call (to try a limit
// with grpc/health/v1, or to limit health checks).
func SkipNone(context.Context, string) bool { return false }

// ErrKey marks a key function's failure, as passed to OnStoreError.
var ErrKey = errors.New("grpclimit: no key for the call")

// ConfigError reports a bad Config field, naming the field (such as
// "Rules[1].Name") and its value: the error of New. Its Error begins with
// "grpclimit: ".
type ConfigError struct {
	Field  string // such as "Rules[1].Name"
	Value  string // the bad value, formatted
	Reason string // why it cannot be used
	// Err is the underlying error, if any. For a rule's Limit it wraps the
	// *floodgate.LimitError: errors.Is(err, floodgate.ErrInvalidLimit)
	// holds.
	Err error
}

// Error returns "grpclimit: ", the field, its value and the reason.
func (e *ConfigError) Error() string { return "grpclimit: " + e.Field + " " + e.Value + " " + e.Reason }

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// Stats counts what a Limiter has done since it was created.
type Stats struct {
	// Denied counts calls and stream messages ended with ResourceExhausted.
	Denied uint64
	// ShadowDenied counts shadow-rule decisions that would have denied.
	ShadowDenied uint64
	// Unavailable counts calls ended with Unavailable by a fail-closed rule.
	Unavailable uint64
	// StoreErrors counts store calls that failed or timed out, refunds
	// included.
	StoreErrors uint64
	// KeyErrors counts key functions that returned an error.
	KeyErrors uint64
	// LocalFallback counts calls this instance decided alone, at a FailLocal
	// rule's share, while the store was unavailable.
	LocalFallback uint64
	// CacheHits counts rule checks denied from the over-limit cache,
	// without asking the store.
	CacheHits uint64
}

// Limiter holds the interceptors. Create it with New; it is safe for
// concurrent use and holds no goroutines or resources.
type Limiter struct {
	front       frontend.Front // the engine, the clock and the rules' checks
	rules       []rule         // the gRPC side of front.Rules, in their order
	headers     HeaderMode
	skip        func(context.Context, string) bool
	report      *frontend.Reporter[context.Context] // the counters and hooks
	anyMessages bool                                // a rule counts stream messages
	traced      bool                                // Config.TracerProvider is set
}

// rule is a Rule checked and prepared for serving.
type rule struct {
	name     string
	limit    floodgate.Limit
	exact    []string // full method names
	services []string // "/pkg.Service/" prefixes
	key      KeyFunc
	messages bool       // counts stream messages
	quota    *anypb.Any // the QuotaFailure detail of a denial
}

// New checks cfg and returns its Limiter. The error is a *ConfigError naming
// the first bad field; no duration or cache bound may be negative.
func New(cfg Config) (*Limiter, error) {
	lib := make([]frontend.Rule, len(cfg.Rules))
	for i, r := range cfg.Rules {
		cost := int64(1)
		if r.MessageCost > 0 {
			cost = r.MessageCost
		}
		lib[i] = frontend.Rule{Name: r.Name, Limit: r.Limit, Cost: cost, Failure: r.Failure, LocalShare: r.LocalShare, NoCache: r.NoCache, Shadow: r.Shadow, Lease: r.Lease}
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
		report:  frontend.NewReporter("grpclimit", cfg.OnStoreError, cfg.OnShadowDeny),
	}
	if l.skip == nil {
		l.skip = SkipHealthAndReflection
	}
	peerKey := PeerAddress(cfg.ClientIP)
	for i, r := range cfg.Rules {
		cr, err := compileRule(i, r, peerKey)
		if err != nil {
			return nil, err
		}
		l.anyMessages = l.anyMessages || cr.messages
		l.rules = append(l.rules, cr)
	}
	return l, nil
}

// compileRule prepares rule i, r, for serving: its message cost, methods,
// key and QuotaFailure; frontend.New checked the rest.
func compileRule(i int, r Rule, peerKey KeyFunc) (rule, error) {
	field := func(f string) string { return fmt.Sprintf("Rules[%d].%s", i, f) }
	if r.MessageCost < 0 || r.MessageCost > r.Limit.Quota {
		return rule{}, &ConfigError{Field: field("MessageCost"), Value: fmt.Sprint(r.MessageCost), Reason: fmt.Sprintf("must be between 0 (count calls) and the limit's quota %d", r.Limit.Quota)}
	}
	cr := rule{
		name:     r.Name,
		limit:    r.Limit,
		key:      r.Key,
		messages: r.MessageCost > 0,
	}
	for j, m := range r.Methods {
		svc, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
		if !strings.HasPrefix(m, "/") || !ok || svc == "" || method == "" || strings.Contains(method, "/") ||
			strings.Contains(method, "*") && method != "*" || strings.Contains(svc, "*") {
			return rule{}, &ConfigError{Field: field(fmt.Sprintf("Methods[%d]", j)), Value: fmt.Sprintf("%q", m),
				Reason: `is not a full method name ("/pkg.Service/Method") or a service ("/pkg.Service/*")`}
		}
		if method == "*" {
			cr.services = append(cr.services, "/"+svc+"/")
		} else {
			cr.exact = append(cr.exact, m)
		}
	}
	if cr.key == nil {
		cr.key = peerKey
	}
	var err error
	if cr.quota, err = quotaFailure(r.Name, r.Limit, false); err != nil {
		return rule{}, &ConfigError{Field: field("Name"), Value: fmt.Sprintf("%q", r.Name), Reason: "cannot be marshalled into a QuotaFailure", Err: err}
	}
	return cr, nil
}

// matches reports whether the rule applies to fullMethod.
func (ru *rule) matches(fullMethod string) bool {
	if ru.exact == nil && ru.services == nil {
		return true
	}
	for _, m := range ru.exact {
		if m == fullMethod {
			return true
		}
	}
	for _, s := range ru.services {
		if strings.HasPrefix(fullMethod, s) {
			return true
		}
	}
	return false
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

// Unary is the unary server interceptor: pass it to
// grpc.ChainUnaryInterceptor (or grpc.UnaryInterceptor). A call over a
// limit ends with the limit's status before the handler runs.
func (l *Limiter) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if l.skip(ctx, info.FullMethod) {
		return handler(ctx, req)
	}
	md, err := l.decide(ctx, info.FullMethod, phaseUnary)
	if err != nil {
		if md != nil {
			_ = grpc.SetTrailer(ctx, md)
		}
		return nil, err
	}
	if md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor: pass it to
// grpc.ChainStreamInterceptor (or grpc.StreamInterceptor). A stream over a
// limit ends with the limit's status before the handler runs; with rules
// that count messages, a received message over a limit makes RecvMsg
// return the status, which the handler should return.
func (l *Limiter) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if l.skip(ctx, info.FullMethod) {
		return handler(srv, ss)
	}
	md, err := l.decide(ctx, info.FullMethod, phaseStart)
	if err != nil {
		if md != nil {
			ss.SetTrailer(md)
		}
		return err
	}
	if md != nil {
		_ = ss.SetHeader(md)
	}
	if l.anyMessages {
		ss = &countedStream{ServerStream: ss, l: l, method: info.FullMethod}
	}
	return handler(srv, ss)
}

// countedStream checks every message the server receives against the rules
// that count messages.
type countedStream struct {
	grpc.ServerStream
	l      *Limiter
	method string
}

// RecvMsg receives a message and checks it; over a limit, it returns the
// limit's status and sets the rate-limit trailer.
func (s *countedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	md, err := s.l.decide(s.Context(), s.method, phaseMessage)
	if err != nil && md != nil {
		s.SetTrailer(md)
	}
	return err
}

// phase is the moment a call is checked at.
type phase uint8

const (
	phaseUnary   phase = iota // a unary call: every rule, message counters with their cost
	phaseStart                // a stream's start: the rules that count calls
	phaseMessage              // a received stream message: the rules that count messages
)

// applies reports whether the rule is checked at phase p.
func (ru *rule) applies(p phase) bool {
	switch p {
	case phaseStart:
		return !ru.messages
	case phaseMessage:
		return ru.messages
	}
	return true
}

// decide applies the rules that match fullMethod at phase p through the
// engine. It returns the rate-limit metadata to send (nil for none) and,
// when the call must not go on, its status error.
func (l *Limiter) decide(ctx context.Context, fullMethod string, p phase) (md metadata.MD, err error) {
	var q frontend.Request
	if l.traced {
		if in, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = tracing.FromMetadata(ctx, in)
		}
	}
	d := l.front.Decide(ctx, &q, ErrKey,
		func(i int) bool { ru := &l.rules[i]; return ru.applies(p) && ru.matches(fullMethod) },
		func(i int) (string, error) { return l.rules[i].key(ctx, fullMethod) })
	if len(d.Rules) == 0 {
		return nil, nil
	}
	res := &d.Result
	l.report.Report(ctx, ctx.Err() != nil, res)
	switch res.Verdict {
	case decide.Admitted:
		return l.metadata(d.Policies, res), nil
	case decide.Denied:
		ru := &l.rules[d.Rules[res.Deciding]]
		return l.metadata(d.Policies, res), denied(ru, &res.Outcomes[res.Deciding])
	case decide.Unavailable:
		return retryAfterMD(res.RetryAfter), unavailable(l.rules[d.Rules[res.Deciding]].name, res.RetryAfter)
	default: // StoreError, or Invalid, which validated rules cannot be
		return nil, storeFailed(res.Err())
	}
}
