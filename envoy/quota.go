package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/storekey"
	"github.com/floodgate-rl/floodgate/internal/tracing"
	"github.com/floodgate-rl/floodgate/quota"
)

// QuotaServiceName is the Rate Limit Quota Service's full name.
const QuotaServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// QuotaOptions configure the Rate Limit Quota Service (Envoy's
// rate_limit_quota filter): see docs/ENVOY.md. The zero value of each field
// picks its default.
type QuotaOptions struct {
	// Interval is the reporting interval, which the filter's
	// reporting_interval should match: how often the replicas share.
	// Default: quota.DefaultInterval (1s).
	Interval time.Duration
	// TTL is each assignment's assignment_time_to_live, a whole number of
	// seconds longer than two intervals. Default: three intervals, rounded
	// up to a second.
	TTL time.Duration
	// Idle abandons a bucket an Envoy reported no use of for this long.
	// Default: quota.DefaultIdle (1m).
	Idle time.Duration
	// Unmatched is the answer for a bucket that matches no rule (or that
	// is over MaxBuckets or MaxBucketIDBytes): "allow_all" (the default, as
	// RLS answers OK for a descriptor without a rule), "deny_all" or
	// "abandon".
	Unmatched string
	// MaxBuckets is the most buckets one stream shares; the others get the
	// Unmatched answer. Default: 1000.
	MaxBuckets int
	// MaxBucketIDBytes bounds a bucket id (its keys and values, in bytes);
	// a larger one gets the Unmatched answer. Default: 1024.
	MaxBucketIDBytes int
}

// Defaults of QuotaOptions.
const (
	DefaultQuotaMaxBuckets       = 1000
	DefaultQuotaMaxBucketIDBytes = 1024
)

// quotaNamespace is the namespace of the quota service's demand counters.
const quotaNamespace = "rlqs|"

// quotaService is the Service's Rate Limit Quota Service.
type quotaService struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	svc       *Service
	sharer    *quota.Sharer
	unmatched quota.Blanket
	ttl       time.Duration
	maxBucket int
	maxID     int
	draining  chan struct{}
	drainOnce sync.Once
	streams   sync.WaitGroup
}

// newQuotaService returns s's quota service under o.
func newQuotaService(s *Service, o QuotaOptions, logger *slog.Logger) (*quotaService, error) {
	q := &quotaService{svc: s, maxBucket: o.MaxBuckets, maxID: o.MaxBucketIDBytes, draining: make(chan struct{})}
	switch o.Unmatched {
	case "", "allow_all":
		q.unmatched = quota.AllowAll
	case "deny_all":
		q.unmatched = quota.DenyAll
	case "abandon":
		q.unmatched = quota.Abandon
	default:
		return nil, fmt.Errorf("envoy: QuotaOptions.Unmatched %q: want allow_all, deny_all or abandon", o.Unmatched)
	}
	if q.maxBucket == 0 {
		q.maxBucket = DefaultQuotaMaxBuckets
	}
	if q.maxID == 0 {
		q.maxID = DefaultQuotaMaxBucketIDBytes
	}
	if q.maxBucket < 0 || q.maxID < 0 {
		return nil, errors.New("envoy: QuotaOptions.MaxBuckets and MaxBucketIDBytes must not be negative")
	}
	sh, err := quota.New(s.engine, quota.Options{Interval: o.Interval, TTL: o.TTL, Idle: o.Idle, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("envoy: QuotaOptions: %w", err)
	}
	q.sharer, q.ttl = sh, sh.Options().TTL
	return q, nil
}

// drain sends every stream's Envoy a TTL of 0 for its assignments, so it
// falls back at once, ends the streams and waits for them to end.
func (q *quotaService) drain() {
	q.drainOnce.Do(func() {
		q.sharer.Drain()
		close(q.draining)
	})
	q.streams.Wait()
}

// quotaStream is one Envoy's stream: the buckets it reported and the
// answers waiting to be sent.
type quotaStream struct {
	q       *quotaService
	domain  string
	mu      sync.Mutex
	buckets map[string]*streamBucket            // by the bucket id's key
	groups  map[string]map[string]*streamBucket // by the sharer's key: the ids that share one limit
	pending map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction
	order   []string
	sent    map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction // the last assignment sent per bucket
	wake    chan struct{}
}

// streamBucket is a bucket of the stream that the sharer shares. Bucket
// ids whose rule has a share_threshold wildcard share one quota.Bucket,
// as they share one counter under RLS: the stream reports their usage
// summed, and splits the share it is given among them by their usage.
type streamBucket struct {
	id     *rlqsv3.BucketId
	idKey  string
	b      quota.Bucket
	used   float64   // the usage reported, smoothed over reports: its part of a split
	usedAt time.Time // its last report with use
	tokens int64     // its part of the group's share in force, for damping
}

// StreamRateLimitQuotas serves one Envoy's stream: its usage reports in,
// the assignments out, until either side ends it or the service drains.
func (q *quotaService) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	select {
	case <-q.draining:
		return status.Error(codes.Unavailable, "the server is shutting down")
	default:
	}
	q.streams.Add(1)
	defer q.streams.Done()
	q.svc.metrics.quotaStreams.Inc()
	defer q.svc.metrics.quotaStreams.Dec()
	st := &quotaStream{q: q, buckets: map[string]*streamBucket{}, groups: map[string]map[string]*streamBucket{}, pending: map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction{},
		sent: map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction{}, wake: make(chan struct{}, 1)}
	client := q.sharer.Join(st.share)
	defer client.Leave()
	recvErr := make(chan error, 1)
	ctx := stream.Context()
	if q.svc.tracer != nil {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = tracing.FromMetadata(ctx, md)
		}
	}
	go func() {
		for {
			msg, err := stream.Recv()
			if err == nil {
				err = st.traceReport(ctx, client, msg)
			}
			if err != nil {
				recvErr <- err
				return
			}
		}
	}()
	for {
		select {
		case <-st.wake:
			if err := st.flush(stream); err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-q.draining:
			st.expireAll()
			return st.flush(stream)
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// tracerName is the instrumentation scope of the quota service's spans;
// decisions are the engine's.
const tracerName = "github.com/floodgate-rl/floodgate/envoy"

// traceReport is report in a span of its own, a child of the stream's
// traceparent, when the service is traced. The sharer decides the
// reported demand later, for every instance at once, in spans of its own.
func (st *quotaStream) traceReport(ctx context.Context, client *quota.Client, msg *rlqsv3.RateLimitQuotaUsageReports) error {
	t := st.q.svc.tracer
	if t == nil {
		return st.report(client, msg)
	}
	_, span := t.Start(ctx, "floodgate.quota.report", trace.WithSpanKind(trace.SpanKindServer))
	err := st.report(client, msg)
	span.SetAttributes(attribute.String("ratelimit.domain", st.domain), attribute.Int("ratelimit.quota.buckets", len(msg.GetBucketQuotaUsages())))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
	return err
}

// report takes one usage report: each bucket is matched to its rule, its
// demand given to the sharer, or answered at once when the sharer has no
// part in it.
func (st *quotaStream) report(client *quota.Client, msg *rlqsv3.RateLimitQuotaUsageReports) error {
	q := st.q
	q.svc.metrics.quotaReports.Inc()
	switch d := msg.GetDomain(); {
	case st.domain == "" && d == "":
		return status.Error(codes.InvalidArgument, "the stream's first usage report names no domain: set the filter's domain")
	case st.domain == "":
		st.domain = d
	case d != "" && d != st.domain:
		return status.Errorf(codes.InvalidArgument, "the stream's domain is %q; a report named %q: one stream, one domain", st.domain, truncate(d))
	}
	rules := q.svc.rules.Load().rules
	now := time.Now()
	var reports []quota.Bucket // in order of first use, each group once
	sums := map[string]int64{}
	for _, u := range msg.GetBucketQuotaUsages() {
		id := u.GetBucketId()
		if len(id.GetBucket()) == 0 {
			return status.Error(codes.InvalidArgument, "a usage report has a bucket with no id")
		}
		used := int64(min(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied(), 1<<40))
		d, entries, ok := q.bucketDescriptor(id)
		idKey := storeKey(newQuotaKeySpace(st.domain), d, nil)
		st.mu.Lock()
		sb := st.buckets[idKey]
		if sb == nil && ok && len(st.buckets) >= q.maxBucket {
			ok = false
		}
		st.mu.Unlock()
		var rule *Rule
		if ok {
			rule = rules.Match(st.domain, entries)
		}
		switch blanket, shared := q.answer(rule); {
		case shared:
			key := idKey
			if rule.shared { // a share_threshold wildcard: one counter for every value it matches
				key = storeKey(newQuotaKeySpace(st.domain), d, rule)
			}
			b := quota.Bucket{Rule: rule.Key, Key: key, Limit: floodgate.NewLimit(floodgate.FixedWindow, int64(rule.RequestsPerUnit), UnitDuration(rule.Unit)),
				Failure: q.svc.failureOf(rule).mode}
			st.mu.Lock()
			st.join(idKey, id, b, used, now)
			st.mu.Unlock()
			if _, seen := sums[key]; !seen {
				reports = append(reports, b)
			}
			sums[key] += used
		default:
			st.mu.Lock()
			st.leave(idKey)
			st.mu.Unlock()
			st.queue(idKey, q.action(id, quota.Share{Blanket: blanket, TTL: q.ttl}, 0))
		}
	}
	for _, b := range reports {
		client.Report(b, sums[b.Key])
	}
	return nil
}

// join records that bucket id (of key idKey) shares b, with used units in
// its report at now; st.mu is held.
func (st *quotaStream) join(idKey string, id *rlqsv3.BucketId, b quota.Bucket, used int64, now time.Time) {
	sb := st.buckets[idKey]
	if sb != nil && sb.b.Key != b.Key { // a reload moved it to another rule
		st.leave(idKey)
		sb = nil
	}
	if sb == nil {
		sb = &streamBucket{id: id, idKey: idKey, used: float64(used), usedAt: now}
		st.buckets[idKey] = sb
		g := st.groups[b.Key]
		if g == nil {
			g = map[string]*streamBucket{}
			st.groups[b.Key] = g
		}
		g[idKey] = sb
	} else {
		sb.used = (sb.used + float64(used)) / 2
	}
	sb.b = b
	if used > 0 {
		sb.usedAt = now
	}
}

// leave forgets bucket idKey; st.mu is held.
func (st *quotaStream) leave(idKey string) {
	sb := st.buckets[idKey]
	if sb == nil {
		return
	}
	delete(st.buckets, idKey)
	if g := st.groups[sb.b.Key]; g != nil {
		delete(g, idKey)
		if len(g) == 0 {
			delete(st.groups, sb.b.Key)
		}
	}
}

// answer returns what a bucket under rule gets without the sharer: a
// blanket, or shared true.
func (q *quotaService) answer(r *Rule) (quota.Blanket, bool) {
	switch {
	case r == nil:
		return q.unmatched, false
	case r.Unlimited, r.ShadowMode, r.QuotaMode || q.svc.quota, q.svc.shadow:
		return quota.AllowAll, false
	case r.blocked():
		return quota.DenyAll, false
	}
	return quota.None, true
}

// bucketDescriptor returns a bucket id's entries in key order, as a
// descriptor's and as Entries; ok false when the id is over
// MaxBucketIDBytes (the descriptor is then empty).
func (q *quotaService) bucketDescriptor(id *rlqsv3.BucketId) (d *ratelimitv3.RateLimitDescriptor, entries []Entry, ok bool) {
	size := 0
	for k, v := range id.GetBucket() {
		size += len(k) + len(v)
		entries = append(entries, Entry{Key: k, Value: v})
	}
	if size > q.maxID {
		return &ratelimitv3.RateLimitDescriptor{}, nil, false
	}
	slices.SortFunc(entries, func(a, b Entry) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	d = &ratelimitv3.RateLimitDescriptor{Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, len(entries))}
	for i, e := range entries {
		d.Entries[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
	}
	return d, entries, true
}

// newQuotaKeySpace returns the key space of a domain's demand counters.
func newQuotaKeySpace(domain string) keySpace {
	ks := storekey.NewSpace(quotaNamespace, domain)
	return keySpace{space: ks, prefix: ks.Key("")}
}

// truncate bounds a value echoed in an error.
func truncate(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// share queues a share the sharer gives the stream.
func (st *quotaStream) share(b quota.Bucket, sh quota.Share) {
	type answer struct {
		key string
		a   *rlqsv3.RateLimitQuotaResponse_BucketAction
	}
	var out []answer
	st.mu.Lock()
	g := st.groups[b.Key]
	idle := st.q.sharer.Options().Idle
	now := time.Now()
	var parts []*streamBucket
	for _, sb := range g {
		switch {
		case sh.Blanket == quota.Abandon:
			st.leave(sb.idKey)
			out = append(out, answer{sb.idKey, st.q.action(sb.id, sh, b.Limit.Window)})
		case len(g) > 1 && now.Sub(sb.usedAt) >= idle: // one value of a shared wildcard gone quiet
			st.leave(sb.idKey)
			out = append(out, answer{sb.idKey, st.q.action(sb.id, quota.Share{Blanket: quota.Abandon}, b.Limit.Window)})
		case sh.Blanket != quota.None:
			out = append(out, answer{sb.idKey, st.q.action(sb.id, sh, b.Limit.Window)})
		default:
			parts = append(parts, sb)
		}
	}
	for _, p := range split(parts, sh) {
		out = append(out, answer{p.sb.idKey, st.q.action(p.sb.id, p.sh, b.Limit.Window)})
	}
	st.mu.Unlock()
	for _, a := range out {
		st.queue(a.key, a.a)
	}
}

// idShare is one bucket id's part of its group's share.
type idShare struct {
	sb *streamBucket
	sh quota.Share
}

// split divides sh among the bucket ids of one group in proportion to
// their usage (evenly when none was used): the parts' tokens add up to at
// most sh's, and a part in force stays while it is at most 2% under its
// new target, so that a small change in the ids' mix does not replace
// Envoy's buckets. One id takes sh whole.
func split(ids []*streamBucket, sh quota.Share) []idShare {
	if len(ids) == 1 {
		ids[0].tokens = sh.Tokens
		return []idShare{{ids[0], sh}}
	}
	var total float64
	for _, sb := range ids {
		total += sb.used
	}
	out := make([]idShare, 0, len(ids))
	for _, sb := range ids {
		part := 1 / float64(len(ids))
		if total > 0 {
			part = sb.used / total
		}
		target := int64(float64(sh.Tokens) * part)
		if sb.tokens > target || float64(sb.tokens) < float64(target)*0.98 {
			sb.tokens = target
		}
		p := sh
		p.Tokens, p.Burst = sb.tokens, max(2, int64(float64(sh.Burst)*part))
		out = append(out, idShare{sb, p})
	}
	return out
}

// queue adds an answer for the bucket of key, replacing one not yet sent.
func (st *quotaStream) queue(key string, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	st.mu.Lock()
	if _, ok := st.pending[key]; !ok {
		st.order = append(st.order, key)
	}
	st.pending[key] = a
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// flush sends the answers waiting, in one response.
func (st *quotaStream) flush(stream grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	st.mu.Lock()
	if len(st.order) == 0 {
		st.mu.Unlock()
		return nil
	}
	resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, 0, len(st.order))}
	for _, k := range st.order {
		a := st.pending[k]
		resp.BucketAction = append(resp.BucketAction, a)
		if a.GetAbandonAction() != nil {
			delete(st.sent, k)
		} else {
			st.sent[k] = a
		}
	}
	clear(st.pending)
	st.order = st.order[:0]
	st.mu.Unlock()
	st.q.svc.metrics.quotaActions.Add(float64(len(resp.BucketAction)))
	return stream.Send(resp)
}

// expireAll queues every assignment sent again with a TTL of 0, so that
// the Envoy falls back at once.
func (st *quotaStream) expireAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, a := range st.sent {
		if _, ok := st.pending[k]; !ok {
			st.order = append(st.order, k)
		}
		qa := a.GetQuotaAssignmentAction()
		st.pending[k] = &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: a.GetBucketId(),
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(0), RateLimitStrategy: qa.GetRateLimitStrategy()}}}
	}
}

// action is the answer that gives the bucket id the share sh, whose tokens
// are per window.
func (q *quotaService) action(id *rlqsv3.BucketId, sh quota.Share, window time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	a := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id}
	if sh.Blanket == quota.Abandon {
		a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}
		return a
	}
	strategy := &typev3.RateLimitStrategy{}
	switch sh.Blanket {
	case quota.AllowAll:
		strategy.Strategy = &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}
	case quota.DenyAll:
		strategy.Strategy = &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}
	default:
		strategy.Strategy = &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tokenBucket(sh, window)}
	}
	a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(sh.TTL),
			RateLimitStrategy:    strategy,
		}}
	return a
}

// tokenBucket is a share as Envoy's token bucket: the share's tokens per
// window (Envoy needs at least one: a share under one per window is one per
// ten windows), its burst as max_tokens.
func tokenBucket(sh quota.Share, window time.Duration) *typev3.TokenBucket {
	tokens := min(sh.Tokens, 1<<32-1)
	if tokens < 1 {
		tokens, window = 1, 10*window
	}
	return &typev3.TokenBucket{
		MaxTokens:     uint32(min(sh.Burst, 1<<32-1)),
		TokensPerFill: wrapperspb.UInt32(uint32(tokens)),
		FillInterval:  durationpb.New(window),
	}
}
