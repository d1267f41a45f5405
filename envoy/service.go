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

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/logthrottle"
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
	// name it: "error", "open" or "closed". Empty means "error": the call
	// fails with UNAVAILABLE and Envoy's failure_mode_deny decides, as with
	// envoyproxy/ratelimit.
	FailureMode string
	// ResponseHeaders adds rate-limit headers to every answer's
	// response_headers_to_add, which Envoy sets on the client's response:
	// RateLimit-Policy and RateLimit (IETF draft 11), X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (when the quota is whole
	// again, in Unix epoch seconds), and Retry-After when over the limit,
	// with the values floodgate's HTTP middleware sends. Off by default, as
	// in the reference; a rule file turns them on for its domain with
	// response_headers: true.
	ResponseHeaders bool
	// Clock tells the time for X-RateLimit-Reset (an absolute time), log
	// throttling and the over-limit cache. Nil: the system clock. Decisions
	// take the store's time.
	Clock floodgate.Clock
	// OverLimitCache turns on and bounds the engine's over-limit cache
	// (decide.Options.OverLimitCache): envoyproxy/ratelimit's
	// LOCAL_CACHE_SIZE_IN_BYTES is its MaxBytes. The zero value: off, as
	// in the reference, so that a request denied by one descriptor still
	// reports every other descriptor's remaining quota; with the cache on,
	// a request a cached denial answers reports only that descriptor's.
	OverLimitCache decide.CacheOptions
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
	rules   atomic.Pointer[Rules]
	failure failure // for rules whose file sets none
	headers bool
	now     func() time.Time // the Clock's Now, or time.Now
	metrics *metrics
	warn    *logthrottle.Logger
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
		fail = f
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if opts.OverLimitCache == (decide.CacheOptions{}) {
		opts.OverLimitCache.Disabled = true
	}
	engine, err := decide.New(store, decide.Options{Logger: opts.Logger, LogInterval: logInterval, Now: now,
		OverLimitCache: opts.OverLimitCache})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	s := &Service{
		engine:  engine,
		store:   store,
		failure: fail,
		headers: opts.ResponseHeaders,
		now:     now,
		metrics: m,
		warn:    logthrottle.New(opts.Logger, logInterval, now),
	}
	s.SetRules(rules)
	return s, nil
}

// SetRules replaces the rules; calls in flight finish under the rules they
// started with. Nil means no rules.
func (s *Service) SetRules(r *Rules) {
	if r == nil {
		r = &Rules{domains: map[string]*domain{}}
	}
	s.rules.Store(r)
}

// Rules returns the rules in force.
func (s *Service) Rules() *Rules { return s.rules.Load() }

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
	rule  *Rule
	kind  kind
	cost  int64
	check int     // kindCheck: the index of its decide.Check
	fail  failure // kindCheck: what an outage means
	err   error   // kindNegative: the give-back failed
	key   string  // kindNegative: the store key
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
// without entries or an entry without a key fail with INVALID_ARGUMENT.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	resp, err := s.shouldRateLimit(ctx, req)
	s.metrics.duration.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		s.metrics.requests.WithLabelValues(codeLabel(status.Code(err))).Inc()
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		s.metrics.requests.WithLabelValues(codeOverLimit).Inc()
	default:
		s.metrics.requests.WithLabelValues(codeOK).Inc()
	}
	return resp, err
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	dom := s.rules.Load().domains[req.GetDomain()]
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
	blocked := false // a non-shadow rule blocks the request
	for i := range ds {
		d := &ds[i]
		d.cost = hits(req, descs[i])
		r := d.rule
		switch {
		case d.kind != kindCheck: // no rule, or a replaced one
		case r.Unlimited:
			d.kind = kindUnlimited
		case descs[i].GetIsNegativeHits():
			d.kind = kindNegative
			if !r.blocked() {
				d.key = storeKey(dom.keys, descs[i])
			}
		case r.blocked():
			d.kind = kindBlocked
			blocked = blocked || !r.ShadowMode
		default:
			d.check, d.fail = len(checks), s.failureOf(r)
			checks = append(checks, decide.Check{Rule: r.Key, Key: storeKey(dom.keys, descs[i]),
				Limit: r.Limit, Cost: d.cost, Failure: d.fail.mode, Shadow: r.ShadowMode})
		}
	}
	var outcomes [maxInline]decide.Outcome
	res := decide.Result{Deciding: -1, Outcomes: outcomes[:min(len(checks), maxInline)]}
	if !blocked {
		res = s.engine.DecideInto(ctx, checks, outcomes[:])
	} else if len(checks) > maxInline {
		res.Outcomes = make([]decide.Outcome, len(checks))
	}
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

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	for i := range ds {
		st, outcome := s.status(&ds[i], &res)
		resp.Statuses[i] = st
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		s.count(req.GetDomain(), dom != nil, descs[i], ds[i].rule, outcome)
	}
	if err := callError(ds, checks, &res); err != nil {
		return nil, err
	}
	if s.headers || (dom != nil && dom.headers) {
		resp.ResponseHeadersToAdd = s.responseHeaders(ds, &res)
	}
	return resp, nil
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
		return failure{mode: r.FailureMode, call: r.FailCall, set: true}
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

// callError translates a verdict that fails the whole call: a store error
// (INTERNAL, whatever the failure mode), an invalid request (INVALID_ARGUMENT;
// a cost above the quota is answered OVER_LIMIT instead), and an outage of a
// rule whose failure mode is error (UNAVAILABLE).
func callError(ds []descriptor, checks []decide.Check, res *decide.Result) error {
	switch res.Verdict {
	case decide.StoreError:
		return status.Errorf(codes.Internal, "rule %s: %v", checks[res.Deciding].Rule, res.Err())
	case decide.Invalid:
		if !errors.Is(res.Err(), floodgate.ErrCostExceedsLimit) {
			return status.Errorf(codes.InvalidArgument, "rule %s: %v", checks[res.Deciding].Rule, res.Err())
		}
	case decide.Unavailable:
		// Any unavailable rule whose failure mode is error fails the call,
		// whichever fail-closed rule the engine named as deciding.
		for i := range ds {
			if d := &ds[i]; d.kind == kindCheck && d.fail.call && !checks[d.check].Shadow &&
				res.Outcomes[d.check].Verdict == decide.Unavailable {
				return status.Errorf(codes.Unavailable, "rule %s: %v", checks[d.check].Rule, res.Outcomes[d.check].Err)
			}
		}
	}
	return nil
}

// validate answers INVALID_ARGUMENT for requests the reference rejects and
// descriptors Envoy's own validation rejects.
func validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return status.Errorf(codes.InvalidArgument, "descriptors[%d]: entries must not be empty", i)
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return status.Errorf(codes.InvalidArgument, "descriptors[%d].entries[%d]: key must not be empty", i, j)
			}
		}
	}
	return nil
}

// hits returns a descriptor's cost: its own hits_addend if set, else the
// request's; 0 means 1.
func hits(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return max(1, int64(min(h.GetValue(), math.MaxInt64)))
	}
	return max(1, int64(req.GetHitsAddend()))
}

// overrideRule builds the rule of a descriptor that carries its own limit
// (Envoy's rate-limit action "limit" override): the override's rate under
// the domain's default algorithm, never in shadow mode, as in the reference.
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
	if err := r.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("requests_per_unit %d: %w", r.RequestsPerUnit, err)
	}
	return r, nil
}

// keyNamespace is the namespace of the service's store keys.
const keyNamespace = "rls|"

// storeKey is the store key of a descriptor in its domain's key space:
// decide.StoreKey in the "rls|" namespace, with the domain as the rule and
// every entry as the key,
// whatever rule matched, so that a key-only or wildcard rule counts each
// value apart, as the reference does. The entries are written key=value,
// joined by '|', with '\', '|' and '=' escaped, so distinct descriptors
// never share a key.
func storeKey(keys decide.KeySpace, d *ratelimitv3.RateLimitDescriptor) string {
	var buf [128]byte // most keys are built on the stack
	b := buf[:0]
	for i, e := range d.GetEntries() {
		if i > 0 {
			b = append(b, '|')
		}
		b = appendEscaped(b, e.GetKey())
		b = append(b, '=')
		b = appendEscaped(b, e.GetValue())
	}
	return keys.Key(string(b))
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

// Outcomes, the "outcome" label of floodgate_envoy_descriptors_total.
const (
	outcomeOK              = "ok"
	outcomeOverLimit       = "over_limit"
	outcomeShadowOverLimit = "shadow_over_limit"
	outcomeUnlimited       = "unlimited"
	outcomeNoRule          = "no_rule"
	outcomeReplaced        = "replaced"
	outcomeBlocked         = "blocked"
	outcomeRefunded        = "negative_hits"
	outcomeFailOpen        = "fail_open"
	outcomeFailClosed      = "fail_closed"
	outcomeFailError       = "fail_error"
	outcomeError           = "error"
	outcomeSkipped         = "skipped"
)

// status turns a descriptor into its status and metric outcome.
func (s *Service) status(d *descriptor, res *decide.Result) (*rlsv3.RateLimitResponse_DescriptorStatus, string) {
	ok := rlsv3.RateLimitResponse_OK
	over := rlsv3.RateLimitResponse_OVER_LIMIT
	r := d.rule
	switch d.kind {
	case kindNoRule:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}, outcomeNoRule
	case kindReplaced:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}, outcomeReplaced
	case kindUnlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}, outcomeUnlimited
	case kindNegative:
		outcome := outcomeRefunded
		if d.err != nil {
			outcome = outcomeError
		}
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: currentLimit(r)}, outcome
	case kindBlocked:
		if r.ShadowMode {
			return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: currentLimit(r)}, outcomeShadowOverLimit
		}
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: over, CurrentLimit: currentLimit(r)}, outcomeBlocked
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: currentLimit(r)}
	o := &res.Outcomes[d.check]
	switch {
	case o.Decided:
		st.LimitRemaining = uint32(min(o.Decision.Remaining, math.MaxUint32))
		switch {
		case o.Decision.Allowed:
			st.DurationUntilReset = durationpb.New(o.Decision.ResetAfter)
			return st, outcomeOK
		case r.ShadowMode:
			st.DurationUntilReset = durationpb.New(o.Decision.RetryAfter)
			return st, outcomeShadowOverLimit
		}
		st.Code = over
		st.DurationUntilReset = durationpb.New(o.Decision.RetryAfter)
		return st, outcomeOverLimit
	case o.Verdict == decide.Invalid && errors.Is(o.Err, floodgate.ErrCostExceedsLimit):
		// A cost above the quota can never be admitted.
		if r.ShadowMode {
			return st, outcomeShadowOverLimit
		}
		st.Code = over
		return st, outcomeOverLimit
	case o.Verdict == decide.Unavailable:
		s.metrics.storeErrors.Inc()
		switch {
		case r.ShadowMode || d.fail.mode == decide.FailOpen:
			return st, outcomeFailOpen
		case d.fail.call:
			st.Code = over // unless it decides the request, which then fails
			return st, outcomeFailError
		}
		st.Code = over
		return st, outcomeFailClosed
	case o.Err != nil:
		if !r.ShadowMode {
			st.Code = over // the request then fails: it is not admitted
		}
		return st, outcomeError
	}
	return st, outcomeSkipped
}

// currentLimit is a rule's limit as the answer reports it.
func currentLimit(r *Rule) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{Name: r.policyName(), RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
}

// count records one descriptor's outcome. Labels stay bounded by the
// configuration: unknown domains share one label value, and request values
// appear only for detailed_metric rules.
func (s *Service) count(domainName string, known bool, d *ratelimitv3.RateLimitDescriptor, r *Rule, outcome string) {
	if !known {
		domainName = unknownLabel
	}
	desc := ""
	if r != nil {
		desc = r.Key
		if r.DetailedMetric {
			desc = metricKey(r.Domain, d)
		}
	}
	s.metrics.descriptors.WithLabelValues(domainName, desc, outcome).Inc()
}
