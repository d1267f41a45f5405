package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
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
	// FailureMode applies to rules whose file sets none. The zero value
	// means FailureModeError: the call fails with UNAVAILABLE and Envoy's
	// failure_mode_deny decides, as with envoyproxy/ratelimit.
	FailureMode FailureMode
	// ResponseHeaders adds rate-limit headers to every answer's
	// response_headers_to_add, which Envoy sets on the client's response:
	// RateLimit-Policy and RateLimit (IETF draft 11), X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (seconds until reset, as
	// Envoy's own x-ratelimit-reset), and Retry-After when over the limit.
	// Off by default, as in the reference; a rule file turns them on for
	// its domain with response_headers: true.
	ResponseHeaders bool
}

// Service answers ShouldRateLimit from its rules and store. It implements
// the generated rlsv3.RateLimitServiceServer; register it with
// [Service.Register]. It is safe for concurrent use, and its rules can be
// replaced while it serves ([Service.SetRules]).
type Service struct {
	store   floodgate.Store
	rules   atomic.Pointer[Rules]
	logger  *slog.Logger
	failure FailureMode
	headers bool
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
	if opts.FailureMode == FailureModeDefault {
		opts.FailureMode = FailureModeError
	}
	if opts.FailureMode > FailureModeClosed {
		return nil, fmt.Errorf("envoy: Options.FailureMode %d is not a failure mode", opts.FailureMode)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Service{
		store:   store,
		logger:  opts.Logger,
		failure: opts.FailureMode,
		headers: opts.ResponseHeaders,
		metrics: m,
		warn:    logthrottle.New(opts.Logger, 10*time.Second, nil),
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

// check is one descriptor of a request on its way to a status.
type check struct {
	rule     *Rule
	key      string // the store key
	cost     int64
	negative bool // is_negative_hits: give quota back instead of taking it
	replaced bool
	d        floodgate.Decision
	err      error
	admitted bool // the store admitted cost for key; refunded if the request is denied
	refunded bool // the admission was given back
}

// ShouldRateLimit decides one request. The answer has one status per
// descriptor, in order:
//
//   - no rule (unknown domain, no matching descriptor, a descriptor without
//     rate_limit, or a rule replaced by another of the same request): OK,
//     without current_limit;
//   - unlimited: OK with limit_remaining 4294967295, without asking the store;
//   - requests_per_unit 0: OVER_LIMIT without asking the store;
//   - otherwise the store's decision for the cost (hits_addend of the
//     descriptor if set, else of the request; 0 means 1): OK or OVER_LIMIT
//     with current_limit (name, requests_per_unit, unit), limit_remaining,
//     and duration_until_reset: the time until the quota is whole again when
//     OK, and the exact time until a retry of the same cost is admitted
//     when OVER_LIMIT (the same moment, for the fixed window). A cost above
//     the rule's quota or capacity can never be admitted: OVER_LIMIT with
//     no duration;
//   - shadow_mode: the decision is counted and reported in limit_remaining
//     and duration_until_reset, but the code is OK;
//   - is_negative_hits: the cost is given back to the key; OK.
//
// overall_code is OVER_LIMIT if any status is. A request answered
// OVER_LIMIT consumes nothing: what its other descriptors admitted is
// refunded. When the store cannot decide, the rule's failure mode applies
// (shadow rules always fail open): open answers OK, closed OVER_LIMIT, and
// error fails the call with UNAVAILABLE. An empty domain, no descriptors, a
// descriptor without entries or an entry without a key fail with
// INVALID_ARGUMENT.
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
	rules := s.rules.Load()
	dom := rules.domains[req.GetDomain()]
	descs := req.GetDescriptors()
	checks := make([]check, len(descs))
	var replaced map[string]bool
	for i, desc := range descs {
		c := &checks[i]
		c.cost, c.negative = hits(req, desc), desc.GetIsNegativeHits()
		if dom == nil {
			continue
		}
		if o := desc.GetLimit(); o != nil {
			r, err := overrideRule(dom, desc)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d].limit: %v", i, err)
			}
			c.rule = r
		} else {
			c.rule = dom.match(len(desc.Entries), func(j int) (string, string) {
				return desc.Entries[j].GetKey(), desc.Entries[j].GetValue()
			})
		}
		if c.rule != nil && len(c.rule.Replaces) > 0 {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			for _, name := range c.rule.Replaces {
				replaced[name] = true
			}
		}
	}
	// A rule named in another matched rule's replaces is dropped for this
	// request: the replacing rule decides, and the replaced one's key is
	// left untouched.
	var toStore []int
	for i := range checks {
		c := &checks[i]
		if c.rule != nil && c.rule.Name != "" && replaced[c.rule.Name] {
			c.rule, c.replaced = nil, true
		}
		if c.rule != nil && !c.rule.Unlimited && !c.rule.blocked() {
			c.key = storeKey(req.GetDomain(), descs[i])
			toStore = append(toStore, i)
		}
	}
	s.decideAll(ctx, checks, toStore)

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks)),
	}
	var failErr, internalErr error
	for i := range checks {
		c := &checks[i]
		st, outcome, err := s.status(c)
		if err != nil {
			if c.err != nil && errors.Is(c.err, floodgate.ErrStoreUnavailable) {
				failErr = err
			} else {
				internalErr = err
			}
		}
		resp.Statuses[i] = st
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		s.count(req.GetDomain(), dom != nil, descs[i], c, outcome)
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT || failErr != nil || internalErr != nil {
		s.refund(ctx, checks)
		// A refunded descriptor reports what remains after the refund:
		// this request took nothing from it.
		for i := range checks {
			if c := &checks[i]; c.refunded {
				st := resp.Statuses[i]
				st.LimitRemaining = uint32(min(c.d.Remaining+c.cost, c.rule.Limit.Quota, math.MaxUint32))
			}
		}
	}
	switch {
	case internalErr != nil:
		return nil, status.Error(codes.Internal, internalErr.Error())
	case failErr != nil:
		return nil, status.Error(codes.Unavailable, failErr.Error())
	}
	if s.headers || (dom != nil && dom.headers) {
		resp.ResponseHeadersToAdd = responseHeaders(checks, resp)
	}
	return resp, nil
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
		return nil, fmt.Errorf("unit %s is not one of %s", o.GetUnit(), unitNames(true))
	}
	r := &Rule{Domain: dom.name, Key: metricKey(dom.name, d), RequestsPerUnit: o.GetRequestsPerUnit(),
		Unit: unit, FailureMode: dom.failure, Source: "request limit override"}
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

// storeKey is the store key of a descriptor: the domain and every entry,
// whatever rule matched, so that a key-only or wildcard rule counts each
// value apart, as the reference does. '\', '|' and '=' are escaped, so
// distinct descriptors never share a key, and the "rls|" start keeps these
// keys apart from the HTTP API's (whose rule names hold no '|').
func storeKey(domainName string, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	n := 4 + len(domainName)
	for _, e := range d.GetEntries() {
		n += 2 + len(e.GetKey()) + len(e.GetValue())
	}
	b.Grow(n + 8)
	b.WriteString("rls|")
	escape(&b, domainName)
	for _, e := range d.GetEntries() {
		b.WriteByte('|')
		escape(&b, e.GetKey())
		b.WriteByte('=')
		escape(&b, e.GetValue())
	}
	return b.String()
}

func escape(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, `\|=`) {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '|' || c == '=' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
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

// decideAll asks the store about the checks at idx, concurrently when there
// are several, so a request's latency is one store round trip.
func (s *Service) decideAll(ctx context.Context, checks []check, idx []int) {
	switch len(idx) {
	case 0:
	case 1:
		s.decide(ctx, &checks[idx[0]])
	default:
		var wg sync.WaitGroup
		for _, i := range idx[1:] {
			wg.Go(func() { s.decide(ctx, &checks[i]) })
		}
		s.decide(ctx, &checks[idx[0]])
		wg.Wait()
	}
}

func (s *Service) decide(ctx context.Context, c *check) {
	if c.negative {
		c.err = s.store.RefundN(ctx, c.key, c.rule.Limit, min(c.cost, c.rule.Limit.Quota))
		return
	}
	c.d, c.err = s.store.AllowN(ctx, c.key, c.rule.Limit, c.cost)
	c.admitted = c.err == nil && c.d.Allowed
}

// refund gives back what the checks admitted, even if the caller has gone
// away.
func (s *Service) refund(ctx context.Context, checks []check) {
	ctx = context.WithoutCancel(ctx)
	var idx []int
	for i := range checks {
		if checks[i].admitted {
			idx = append(idx, i)
		}
	}
	refund1 := func(c *check) {
		if err := s.store.RefundN(ctx, c.key, c.rule.Limit, c.cost); err != nil {
			s.metrics.refundErrors.Inc()
			s.warn.Warn(ctx, "refund failed: a denied request keeps the quota it took", slog.String("rule", c.rule.Key), slog.String("error", err.Error()))
		} else {
			c.refunded = true
		}
		c.admitted = false
	}
	switch len(idx) {
	case 0:
	case 1:
		refund1(&checks[idx[0]])
	default:
		var wg sync.WaitGroup
		for _, i := range idx {
			wg.Go(func() { refund1(&checks[i]) })
		}
		wg.Wait()
	}
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
)

// effectiveFailure returns the failure mode that applies to a rule.
func (s *Service) effectiveFailure(r *Rule) FailureMode {
	switch {
	case r.ShadowMode:
		return FailureModeOpen
	case r.FailureMode != FailureModeDefault:
		return r.FailureMode
	}
	return s.failure
}

// status turns a check into its descriptor status and metric outcome. A
// non-nil error fails the whole call.
func (s *Service) status(c *check) (*rlsv3.RateLimitResponse_DescriptorStatus, string, error) {
	ok := rlsv3.RateLimitResponse_OK
	over := rlsv3.RateLimitResponse_OVER_LIMIT
	r := c.rule
	switch {
	case r == nil && c.replaced:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}, outcomeReplaced, nil
	case r == nil:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}, outcomeNoRule, nil
	case r.Unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}, outcomeUnlimited, nil
	case r.blocked() && c.negative:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: currentLimit(r)}, outcomeRefunded, nil
	case r.blocked():
		code, outcome := over, outcomeBlocked
		if r.ShadowMode {
			code, outcome = ok, outcomeShadowOverLimit
		}
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: currentLimit(r)}, outcome, nil
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: currentLimit(r)}
	if c.err != nil {
		switch {
		case errors.Is(c.err, floodgate.ErrCostExceedsLimit):
			if r.ShadowMode {
				return st, outcomeShadowOverLimit, nil
			}
			st.Code = over
			return st, outcomeOverLimit, nil
		case errors.Is(c.err, floodgate.ErrStoreUnavailable):
			s.metrics.storeErrors.Inc()
			mode := s.effectiveFailure(r)
			s.warn.Warn(context.Background(), "rate-limit store unavailable; applying the rule's failure mode", slog.String("rule", r.Key), slog.String("failure_mode", mode.String()), slog.String("error", c.err.Error()))
			switch mode {
			case FailureModeOpen:
				return st, outcomeFailOpen, nil
			case FailureModeClosed:
				st.Code = over
				return st, outcomeFailClosed, nil
			}
			return st, outcomeFailError, fmt.Errorf("rule %s: %w", r.Key, c.err)
		}
		return st, outcomeError, fmt.Errorf("rule %s: %w", r.Key, c.err)
	}
	if c.negative {
		return st, outcomeRefunded, nil
	}
	st.LimitRemaining = uint32(min(c.d.Remaining, math.MaxUint32))
	switch {
	case c.d.Allowed:
		st.DurationUntilReset = durationpb.New(c.d.ResetAfter)
		return st, outcomeOK, nil
	case r.ShadowMode:
		st.DurationUntilReset = durationpb.New(c.d.RetryAfter)
		return st, outcomeShadowOverLimit, nil
	}
	st.Code = over
	st.DurationUntilReset = durationpb.New(c.d.RetryAfter)
	return st, outcomeOverLimit, nil
}

// currentLimit is a rule's limit as the answer reports it.
func currentLimit(r *Rule) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{Name: r.policyName(), RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
}

// count records one descriptor's outcome. Labels stay bounded by the
// configuration: unknown domains share one label value, and request values
// appear only for detailed_metric rules.
func (s *Service) count(domainName string, known bool, d *ratelimitv3.RateLimitDescriptor, c *check, outcome string) {
	if !known {
		domainName = unknownLabel
	}
	desc := ""
	if c.rule != nil {
		desc = c.rule.Key
		if c.rule.DetailedMetric {
			desc = metricKey(c.rule.Domain, d)
		}
	}
	s.metrics.descriptors.WithLabelValues(domainName, desc, outcome).Inc()
}
