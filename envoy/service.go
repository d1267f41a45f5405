package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/internal/rulecheck"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/logthrottle"
	"github.com/floodgate-rl/floodgate/internal/tracing"
)

// Options are a Service's settings and dependencies. The zero value of each
// field picks its default.
type Options struct {
	// Logger receives store failures (at most one line per 10 seconds) and
	// rule reloads. Default: discard.
	Logger *slog.Logger
	// Registerer receives the service's metrics (floodgate_envoy_*).
	// Default: none, the metrics are kept but not exported.
	Registerer prometheus.Registerer
	// FailureMode applies to rules whose file sets none, named as rule files
	// name it: "error", "open" or "closed" ("local" needs a share, which
	// only a rule file gives). Empty means "error": the call fails with
	// UNAVAILABLE and Envoy's failure_mode_deny decides, as with
	// envoyproxy/ratelimit.
	FailureMode string
	// ResponseHeaders adds to every answer's response_headers_to_add the
	// rate-limit headers floodgate's HTTP middleware sends for the same
	// decisions (RateLimit-Policy, RateLimit, X-RateLimit-*, and Retry-After
	// when over the limit). Shadow descriptors never appear. Off by
	// default, as in the reference; a rule file turns them on for its
	// domain with response_headers: true.
	ResponseHeaders bool
	// Clock tells the time for X-RateLimit-Reset (an absolute time), log
	// throttling, the over-limit cache and the duration_until_reset of
	// answers the store was not asked about. Nil: the system clock. Decisions
	// take the store's time.
	Clock floodgate.Clock
	// OverLimitCache turns on and bounds the engine's over-limit cache;
	// envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES is its MaxBytes. The
	// zero value: off, as in the reference, so that a denied request still
	// reports every descriptor's remaining quota; a request a cached denial
	// answers reports only that descriptor's.
	OverLimitCache decide.CacheOptions
	// ShadowMode is envoyproxy/ratelimit's global SHADOW_MODE: every rule
	// is decided and counted, each status says what it found, but the
	// overall code is always OK.
	ShadowMode bool
	// QuotaMode is the global QUOTA_MODE: every rule is in quota mode
	// (Rule.QuotaMode).
	QuotaMode bool
	// DynamicMetadata (RESPONSE_DYNAMIC_METADATA) sets each answer's
	// dynamic_metadata as the reference does: the domain, the descriptors
	// (entries as "key=value", limit, hitsAddend), the request's
	// hitsAddend, quotaModeViolations and quotaModeEnabled.
	DynamicMetadata bool
	// PeerHeaders, if set (LIMIT_RESPONSE_HEADERS_ENABLED), adds the
	// reference's three headers to every answer that has a limited
	// descriptor that is not shadow, naming them as set here (empty names
	// take the reference's defaults, RateLimit-Limit, RateLimit-Remaining,
	// RateLimit-Reset). Unlike the reference, they never describe a shadow
	// descriptor (shadow_mode, quota mode, ShadowMode, QuotaMode).
	PeerHeaders *PeerHeaders
	// NearLimitRatio is the share of a quota past which hits count as
	// near_limit in ratelimit_service_rate_limit_near_limit, as the
	// reference's NEAR_LIMIT_RATIO. Zero: 0.8.
	NearLimitRatio float64
	// RequireRules makes a service started without rules (New given nil)
	// fail every call with gRPC code Unknown and [NoRulesMessage], as the
	// reference does until its first configuration loads, so that Envoy's
	// failure_mode_deny decides. The first SetRules with rules ends it.
	// Off: no rules answer OK, as for unknown domains.
	RequireRules bool
	// Quota configures the Rate Limit Quota Service ([Service.RegisterQuota]).
	Quota QuotaOptions
	// TracerProvider, if set, traces each decision and store call
	// (decide.Options.TracerProvider) and each quota usage report,
	// continuing the W3C traceparent of a call's gRPC metadata, and puts
	// trace ids on floodgate_envoy_request_duration_seconds as exemplars.
	// Nil: no tracing.
	TracerProvider trace.TracerProvider
}

// NoRulesMessage is the error of every call while a service with
// Options.RequireRules has no rules: the reference's words.
const NoRulesMessage = "no rate limit configuration loaded"

// PeerHeaders names the reference's response headers.
type PeerHeaders struct {
	// Limit carries the requests_per_unit (LIMIT_LIMIT_HEADER).
	Limit string
	// Remaining carries the limit_remaining (LIMIT_REMAINING_HEADER).
	Remaining string
	// Reset carries the seconds until the unit's clock-aligned end
	// (LIMIT_RESET_HEADER).
	Reset string
}

// DefaultNearLimitRatio is the reference's NEAR_LIMIT_RATIO default.
const DefaultNearLimitRatio = 0.8

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// logInterval is the least time between two log lines about failures.
const logInterval = 10 * time.Second

// Service answers ShouldRateLimit from its rules and store. It implements
// the generated rlsv3.RateLimitServiceServer; register it with
// [Service.Register]. It is safe for concurrent use, and its rules can be
// replaced while it serves ([Service.SetRules]).
type Service struct {
	engine  *decide.Engine
	store   floodgate.Store
	rules   atomic.Pointer[ruleSet]
	failure failure // for rules whose file sets none
	headers bool
	now     func() time.Time // the Clock's Now, or time.Now
	shadow  bool             // global shadow mode
	quota   bool             // global quota mode
	meta    bool
	peerHdr *PeerHeaders
	near    float64
	metrics *metrics
	unknown *series // the descriptors of unknown domains
	warn    *logthrottle.Logger
	noRules atomic.Bool // Options.RequireRules, until rules are set
	quotaSv *quotaService
	tracer  trace.Tracer // nil: not traced
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns a service deciding with store under rules (nil rules answer OK
// to everything, as for unknown domains).
func New(store floodgate.Store, rules *Rules, opts Options) (*Service, error) {
	if store == nil {
		return nil, errors.New("envoy: New needs a store")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	now := time.Now
	if opts.Clock != nil {
		now = opts.Clock.Now
	}
	fail := errorMode
	if opts.FailureMode != "" {
		f, err := parseFailure(opts.FailureMode)
		if err != nil {
			return nil, fmt.Errorf("envoy: Options.FailureMode: %w", err)
		}
		if f.mode == decide.FailLocal {
			return nil, errors.New(`envoy: Options.FailureMode "local" needs a share of each limit: set failure_mode: local with local_share or instances in the rule files instead`)
		}
		fail = f
	}
	if opts.NearLimitRatio < 0 || opts.NearLimitRatio > 1 {
		return nil, fmt.Errorf("envoy: Options.NearLimitRatio %v is not between 0 and 1", opts.NearLimitRatio)
	}
	if opts.NearLimitRatio == 0 {
		opts.NearLimitRatio = DefaultNearLimitRatio
	}
	var peerHdr *PeerHeaders
	if h := opts.PeerHeaders; h != nil {
		peerHdr = &PeerHeaders{Limit: cmpOr(h.Limit, "RateLimit-Limit"), Remaining: cmpOr(h.Remaining, "RateLimit-Remaining"),
			Reset: cmpOr(h.Reset, "RateLimit-Reset")}
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if opts.OverLimitCache == (decide.CacheOptions{}) {
		opts.OverLimitCache.Disabled = true
	}
	engine, err := decide.New(store, decide.Options{Logger: opts.Logger, LogInterval: logInterval, Now: now,
		OverLimitCache: opts.OverLimitCache, TracerProvider: opts.TracerProvider})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	s := &Service{
		engine:  engine,
		store:   store,
		failure: fail,
		headers: opts.ResponseHeaders,
		now:     now,
		shadow:  opts.ShadowMode,
		quota:   opts.QuotaMode,
		meta:    opts.DynamicMetadata,
		peerHdr: peerHdr,
		near:    opts.NearLimitRatio,
		metrics: m,
		unknown: newSeries(unknownLabel, ""),
		warn:    logthrottle.New(opts.Logger, logInterval, now),
	}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	s.SetRules(rules)
	s.noRules.Store(rules == nil && opts.RequireRules)
	if s.quotaSv, err = newQuotaService(s, opts.Quota, opts.Logger); err != nil {
		return nil, err
	}
	return s, nil
}

// Close gives back to the store the quota the rules' leases hold, waiting
// until ctx ends; the service goes on deciding after it, asking the store
// per request. It does not end the quota service's streams: DrainQuota does.
func (s *Service) Close(ctx context.Context) error { return s.engine.Close(ctx) }

// DrainQuota sends every Envoy on the quota service a TTL of 0 for its
// assignments, so that each falls back at once, and ends their streams,
// waiting for them: call it before stopping the gRPC server gracefully,
// which waits for streams. New streams are refused after it.
func (s *Service) DrainQuota() { s.quotaSv.drain() }

// SetRules replaces the rules; calls in flight finish under the rules they
// started with. Nil means no rules.
func (s *Service) SetRules(r *Rules) {
	if r == nil {
		r = &Rules{domains: map[string]*domain{}}
	} else {
		defer s.noRules.Store(false)
	}
	s.rules.Store(newRuleSet(r))
	s.metrics.loadSuccess.Inc()
}

// AwaitingRules reports whether the service fails every call because it
// started without rules under Options.RequireRules and none have been set
// since.
func (s *Service) AwaitingRules() bool { return s.noRules.Load() }

// LoadFailed counts a reload whose rules did not load, so that the rules in
// force stay (ratelimit_service_config_load_error).
func (s *Service) LoadFailed() { s.metrics.loadError.Inc() }

// Rules returns the rules in force.
func (s *Service) Rules() *Rules { return s.rules.Load().rules }

// kind is how a descriptor is decided.
type kind uint8

const (
	kindNoRule    kind = iota // no rule applies: OK
	kindReplaced              // its rule is replaced by another of the request: OK
	kindUnlimited             // OK without asking the store
	kindBlocked               // requests_per_unit 0: OVER_LIMIT without asking the store
	kindNegative              // is_negative_hits: its cost is given back to the key
	kindCheck                 // decided by the engine
)

// descriptor is one descriptor of a request on its way to a status.
type descriptor struct {
	rule   *Rule
	kind   kind
	cost   int64
	peek   bool    // hits_addend 0: check only
	quota  bool    // quota mode (the rule's or global): never OVER_LIMIT
	shadow bool    // shadow_mode, global shadow or quota mode: the check's Shadow; never in a header (inHeaders)
	over   bool    // kindCheck, quota or global shadow: the store found it over
	check  int     // kindCheck: the index of its decide.Check
	fail   failure // kindCheck: what an outage means
	err    error   // kindNegative: the give-back failed
	key    string  // kindNegative: the store key
}

// maxInline is the number of descriptors a request can carry before
// ShouldRateLimit's buffers leave the stack.
const maxInline = 8

// ShouldRateLimit decides one request. The answer has one status per
// descriptor, in order:
//
//   - no rule (unknown domain, no matching descriptor, a descriptor without
//     rate_limit, or a rule replaced by another of the same request): OK,
//     without current_limit;
//   - unlimited: OK with limit_remaining 4294967295, without asking the store;
//   - requests_per_unit 0: OVER_LIMIT without asking the store; the
//     request's other descriptors are then not asked either, so it
//     consumes nothing;
//   - otherwise the store's decision for the cost (hits_addend of the
//     descriptor if set, else of the request; 0 means 1): OK or OVER_LIMIT
//     with current_limit (name, requests_per_unit, unit), limit_remaining,
//     and duration_until_reset: the time until the quota is whole again when
//     OK, and the exact time until a retry of the same cost is admitted
//     when OVER_LIMIT (the same moment, for the fixed window). A cost above
//     the rule's quota or capacity can never be admitted: OVER_LIMIT with
//     no duration, and the store is not asked;
//   - shadow_mode: the decision is counted and reported in limit_remaining
//     and duration_until_reset, but the code is OK; shadow descriptors are
//     decided only for requests the others admit;
//   - is_negative_hits: the cost is given back to the key; OK (a give-back
//     that fails is logged and counted, and changes nothing in the answer);
//   - a descriptor the store was not asked about, because another one
//     already decided the request: OK with current_limit only.
//
// overall_code is OVER_LIMIT if any status is. A request answered
// OVER_LIMIT consumes nothing: what its other descriptors admitted is
// given back, and their statuses report what remains after that. When the
// store cannot decide, the rule's failure mode applies (shadow rules always
// fail open): open answers OK, closed OVER_LIMIT, and error fails the call
// with UNAVAILABLE. Any other store error fails the call with INTERNAL,
// whatever the failure mode. An empty domain, no descriptors, a descriptor
// without entries or an entry without a key, a limit override the domain's
// algorithm cannot hold, and more hits than a sliding-window log takes in
// one request (unless in shadow or quota mode) fail with INVALID_ARGUMENT;
// then, with Options.RequireRules and no rules loaded yet, every call fails
// with UNKNOWN and NoRulesMessage.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	if s.tracer != nil {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = tracing.FromMetadata(ctx, md)
		}
	}
	var sc trace.SpanContext
	resp, err := s.shouldRateLimit(ctx, req, &sc)
	tracing.Observe(s.metrics.duration, sc, time.Since(start).Seconds())
	switch {
	case err != nil:
		c := status.Code(err)
		s.metrics.requests.WithLabelValues(codeLabel(c)).Inc()
		if c == codes.InvalidArgument || c == codes.Unknown {
			s.metrics.callErrors.WithLabelValues("service_error").Inc()
		} else {
			s.metrics.callErrors.WithLabelValues("redis_error").Inc()
		}
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		s.metrics.requestsOver.Inc()
	default:
		s.metrics.requestsOK.Inc()
	}
	return resp, err
}

// shouldRateLimit answers req; sc is set to the decision's span context.
func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, sc *trace.SpanContext) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	if s.noRules.Load() { // after the request's checks, as in the reference
		return nil, status.Error(codes.Unknown, NoRulesMessage)
	}
	set := s.rules.Load()
	dom := set.rules.domains[req.GetDomain()]
	descs := req.GetDescriptors()
	var (
		dsBuf     [maxInline]descriptor
		checksBuf [maxInline]decide.Check
	)
	ds := dsBuf[:0]
	if len(descs) > maxInline {
		ds = make([]descriptor, 0, len(descs))
	}
	for range descs {
		ds = append(ds, descriptor{})
	}
	if dom != nil {
		if err := match(dom, descs, ds); err != nil {
			return nil, err
		}
	}
	checks := checksBuf[:0]
	for i := range ds {
		d := &ds[i]
		d.cost, d.peek = hits(req, descs[i])
		r := d.rule
		d.quota = r != nil && (r.QuotaMode || s.quota)
		d.shadow = r != nil && (r.ShadowMode || d.quota || s.shadow)
		switch {
		case d.kind != kindCheck: // no rule, or a replaced one
		case r.Unlimited:
			d.kind = kindUnlimited
		case descs[i].GetIsNegativeHits():
			d.kind = kindNegative
			if !r.blocked() && !d.peek {
				d.key = storeKey(dom.keys, descs[i], r)
			}
		case r.blocked():
			d.kind, d.check = kindBlocked, len(checks)
			checks = append(checks, decide.Check{Rule: r.Key, Blocked: true, CheckOnly: d.peek, Shadow: d.shadow})
		default:
			d.check, d.fail = len(checks), s.failureOf(r)
			checks = append(checks, decide.Check{Rule: r.Key, Key: storeKey(dom.keys, descs[i], r),
				Limit: r.Limit, Cost: d.cost, CheckOnly: d.peek, Failure: d.fail.mode, LocalShare: d.fail.share,
				Shadow: d.shadow, OverQuotaDenies: true, Lease: r.Lease})
		}
	}
	var outcomes [maxInline]decide.Outcome
	res := s.engine.DecideInto(ctx, checks, outcomes[:])
	*sc = res.SpanContext
	for i := range ds {
		if d := &ds[i]; d.kind == kindNegative && d.key != "" {
			s.giveBack(ctx, d)
		}
	}
	for i := range res.Outcomes {
		if res.Outcomes[i].RefundErr != nil {
			s.metrics.refundErrors.Inc()
		}
	}

	resp, bufs := newResponse(len(ds))
	// OVER_LIMIT when the engine denied, or a rule that fails closed could
	// not decide; not for a fail-open rule left undecided when the caller
	// went away (the engine's Unavailable then, which answers nobody).
	if res.Verdict == decide.Denied || res.Verdict == decide.Unavailable && res.Checks[res.Deciding].Mode() != decide.FailOpen {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	now := s.now()
	var violations []int // quota-mode descriptors over their quota
	shadowOver := false  // under global shadow, a descriptor over its limit
	for i := range ds {
		d := &ds[i]
		st, outcome := s.status(d, &res, now, &bufs[i])
		if d.kind == kindCheck && res.Outcomes[d.check].Local {
			s.metrics.storeErrors.Inc() // the store could not decide it
			outcome = outcome.local()
		}
		resp.Statuses[i] = st
		if d.quota && d.over {
			violations = append(violations, i)
		}
		shadowOver = shadowOver || s.shadow && st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		cached := d.kind == kindCheck && res.Outcomes[d.check].Cached
		s.count(set, dom, descs[i], d, st, outcome, cached)
	}
	if err := callError(descs, ds, checks, &res); err != nil {
		return nil, err
	}
	if s.headers || (dom != nil && dom.headers) {
		resp.ResponseHeadersToAdd = s.responseHeaders(ds, &res)
	}
	if s.peerHdr != nil {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, s.peerHeaders(ds, &res, resp, now)...)
	}
	if shadowOver && resp.OverallCode == rlsv3.RateLimitResponse_OK {
		s.metrics.globalShadow.Inc() // every check was shadow: the engine admitted it
	}
	if s.meta {
		resp.DynamicMetadata = dynamicMetadata(req, ds, violations)
	}
	return resp, nil
}

// answer is a one-descriptor response, allocated at once.
type answer struct {
	resp rlsv3.RateLimitResponse
	ptr  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	buf  [1]statusBuf
}

// newResponse returns an OK response with room for n statuses, and the
// buffers to build them in: one allocation for the usual single
// descriptor, three for more.
func newResponse(n int) (*rlsv3.RateLimitResponse, []statusBuf) {
	if n == 1 {
		a := &answer{}
		a.resp.OverallCode, a.resp.Statuses = rlsv3.RateLimitResponse_OK, a.ptr[:]
		return &a.resp, a.buf[:]
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)},
		make([]statusBuf, n)
}

// match finds each descriptor's rule in dom, and drops the rules that
// another matched rule of the request replaces: the replacing rule decides,
// and the replaced one's key is left untouched. A matched descriptor is left
// as kindCheck, to be refined by the caller.
func match(dom *domain, descs []*ratelimitv3.RateLimitDescriptor, ds []descriptor) error {
	var replaced []string
	for i, desc := range descs {
		d := &ds[i]
		if desc.GetLimit() != nil {
			r, err := overrideRule(dom, desc)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: %v", i, err)
			}
			d.rule = r
		} else {
			d.rule = dom.match(len(desc.Entries), func(j int) (string, string) {
				return desc.Entries[j].GetKey(), desc.Entries[j].GetValue()
			})
		}
		if d.rule != nil {
			d.kind = kindCheck
			replaced = append(replaced, d.rule.Replaces...)
		}
	}
	if len(replaced) == 0 {
		return nil
	}
	for i := range ds {
		if r := ds[i].rule; r != nil && r.Name != "" && slices.Contains(replaced, r.Name) {
			ds[i] = descriptor{kind: kindReplaced}
		}
	}
	return nil
}

// failureOf returns the failure mode that applies to a rule.
func (s *Service) failureOf(r *Rule) failure {
	if r.failureSet {
		return failure{mode: r.FailureMode, share: r.LocalShare, set: true}
	}
	return s.failure
}

// giveBack gives a negative-hits descriptor's cost back to its key, as Envoy
// asks with is_negative_hits. This is a protocol feature, not a refund of a
// request that was not admitted: it happens whatever the request's verdict.
func (s *Service) giveBack(ctx context.Context, d *descriptor) {
	r := d.rule
	d.err = s.engine.Refund(ctx, d.key, r.Limit, min(d.cost, r.Limit.Quota))
	if d.err != nil && ctx.Err() == nil {
		s.metrics.storeErrors.Inc()
		s.warn.Warn(ctx, "floodgate: giving back is_negative_hits failed; the key keeps the hits it counted",
			slog.String("rule", r.Key), slog.String("error", d.err.Error()))
	}
}

// hits returns a descriptor's cost: its own hits_addend if set, where 0
// means a check that takes nothing (peek), else the request's, where 0
// means 1 (Envoy sends 0 when it sets none), as in the reference.
func hits(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) (cost int64, peek bool) {
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() == 0 {
			return 0, true
		}
		return int64(min(h.GetValue(), math.MaxInt64)), false
	}
	return max(1, int64(req.GetHitsAddend())), false
}

// overrideRule builds the rule of a descriptor that carries its own limit
// (Envoy's "limit" override): its rate under the domain's default algorithm
// and failure mode, never in shadow mode, as in the reference. Under
// failure_mode local it takes the domain's share, and fails as error
// without a usable one.
func overrideRule(dom *domain, d *ratelimitv3.RateLimitDescriptor) (*Rule, error) {
	o := d.GetLimit()
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	window := UnitDuration(unit)
	if window == 0 {
		return nil, fmt.Errorf("unit %s is not one of %s", o.GetUnit(), strings.Join(unitNames(true), ", "))
	}
	r := &Rule{Domain: dom.name, Key: metricKey(dom.name, d), RequestsPerUnit: o.GetRequestsPerUnit(),
		Unit: unit, Source: "request limit override", override: true}
	r.setFailure(dom.failure)
	if r.RequestsPerUnit == 0 {
		return r, nil
	}
	r.Limit = floodgate.NewLimit(dom.alg, int64(r.RequestsPerUnit), window)
	if dom.alg == floodgate.TokenBucket {
		r.Limit = floodgate.NewTokenBucket(int64(r.RequestsPerUnit), int64(r.RequestsPerUnit), window)
	}
	// The core's bounds for the domain's algorithm (a sliding-window log
	// holds one entry per request), in the request's terms.
	if err := r.Limit.Validate(); err != nil {
		var le *floodgate.LimitError
		if errors.As(err, &le) && le.Field == "Quota" {
			return nil, fmt.Errorf("requests_per_unit %d %s", r.RequestsPerUnit, le.Reason)
		}
		return nil, fmt.Errorf("requests_per_unit %d per %s: %w", r.RequestsPerUnit, o.GetUnit(), err)
	}
	if r.FailureMode == decide.FailLocal && (r.LocalShare == 0 || rulecheck.Rule(r.Limit, decide.FailLocal, r.LocalShare) != nil) {
		// Local needs the domain's share, usable for this limit (the
		// matched rule's own share is not the override's); without one
		// the override fails as error.
		r.setFailure(failure{mode: errorMode.mode, set: true})
	}
	return r, nil
}
