package envoy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

const quotaRules = `domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: open
    rate_limit: {unlimited: true}
  - key: shut
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 600}
  - key: path
    value: /own/*
    rate_limit: {unit: second, requests_per_unit: 100}
`

// quotaReplica starts a Service over store serving the quota service on a
// loopback port, and returns its address and the service.
func quotaReplica(t *testing.T, store floodgate.Store, o QuotaOptions) (string, *Service) {
	t.Helper()
	return quotaServer(t, store, Options{Logger: slog.New(slog.DiscardHandler), Quota: o})
}

// quotaServer is quotaReplica with the Service's whole Options.
func quotaServer(t *testing.T, store floodgate.Store, o Options) (string, *Service) {
	t.Helper()
	rules, err := Parse(Source{Name: "edge.yaml", Data: []byte(quotaRules)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(store, rules, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := NewGRPCServer(svc)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(func() { svc.DrainQuota(); g.Stop() })
	return ln.Addr().String(), svc
}

// fakeEnvoy behaves as Envoy's rate_limit_quota filter does
// (source/extensions/filters/http/rate_limit_quota): a bucket's first
// request reports it at once, then every reporting interval all buckets
// are reported with the requests allowed and denied since and
// time_elapsed in whole seconds; an assignment's token bucket is replaced,
// full, when it differs from the one in force and carried over when the
// same; it expires after assignment_time_to_live's seconds, when the
// no-assignment behaviour (here allow all) applies; an abandoned bucket is
// forgotten.
type fakeEnvoy struct {
	t        *testing.T
	stream   grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	domain   string
	mu       sync.Mutex
	buckets  map[string]*fakeBucket
	actions  []*rlqsv3.RateLimitQuotaResponse_BucketAction
	streamEr error
}

type fakeBucket struct {
	id            map[string]string
	strategy      *typev3.RateLimitStrategy
	expires       time.Time
	tokens        float64
	filled        time.Time
	allowed, deny uint64
	lastReport    time.Time
	admittedSpans []time.Time // when each request was admitted
}

func dialEnvoy(t *testing.T, addr, domain string) *fakeEnvoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEnvoy{t: t, stream: stream, domain: domain, buckets: map[string]*fakeBucket{}}
	go e.receive()
	return e
}

func (e *fakeEnvoy) receive() {
	for {
		resp, err := e.stream.Recv()
		e.mu.Lock()
		if err != nil {
			e.streamEr = err
			e.mu.Unlock()
			return
		}
		now := time.Now()
		for _, a := range resp.GetBucketAction() {
			e.actions = append(e.actions, a)
			b := e.buckets[bucketName(a.GetBucketId().GetBucket())]
			if b == nil {
				continue // Envoy ignores an action for a bucket it does not have
			}
			if a.GetAbandonAction() != nil {
				delete(e.buckets, bucketName(b.id))
				continue
			}
			qa := a.GetQuotaAssignmentAction()
			st := qa.GetRateLimitStrategy()
			if tb := st.GetTokenBucket(); tb != nil && !sameBucket(b.strategy.GetTokenBucket(), tb) {
				b.tokens, b.filled = float64(tb.GetMaxTokens()), now
			}
			b.strategy = st
			b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
		}
		e.mu.Unlock()
	}
}

func sameBucket(a, b *typev3.TokenBucket) bool {
	return a != nil && a.GetMaxTokens() == b.GetMaxTokens() && a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().AsDuration() == b.GetFillInterval().AsDuration()
}

func bucketName(id map[string]string) string {
	var s string
	for _, k := range []string{"tenant", "open", "shut", "nobody", "path"} {
		if v, ok := id[k]; ok {
			s += k + "=" + v + ";"
		}
	}
	return s
}

// request decides one request of the bucket id at now, creating the
// bucket (and reporting it at once) if it is new.
func (e *fakeEnvoy) request(id map[string]string, now time.Time) bool {
	e.mu.Lock()
	name := bucketName(id)
	b := e.buckets[name]
	if b == nil {
		b = &fakeBucket{id: id, lastReport: now}
		e.buckets[name] = b
	}
	ok := true
	switch st := b.strategy; {
	case st == nil || !now.Before(b.expires):
	case st.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL && st.GetTokenBucket() == nil:
		ok = false
	case st.GetTokenBucket() != nil:
		tb := st.GetTokenBucket()
		rate := float64(tb.GetTokensPerFill().GetValue()) / float64(tb.GetFillInterval().AsDuration().Seconds())
		b.tokens = math.Min(float64(tb.GetMaxTokens()), b.tokens+rate*now.Sub(b.filled).Seconds())
		b.filled = now
		if ok = b.tokens >= 1; ok {
			b.tokens--
		}
	}
	if ok {
		b.allowed++
		b.admittedSpans = append(b.admittedSpans, now)
	} else {
		b.deny++
	}
	first := b.allowed+b.deny == 1 && b.strategy == nil
	e.mu.Unlock()
	if first {
		e.report(now, b)
	}
	return ok
}

// report sends usage of the buckets given, or of all buckets.
func (e *fakeEnvoy) report(now time.Time, only ...*fakeBucket) {
	e.mu.Lock()
	msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.domain}
	bs := only
	if len(bs) == 0 {
		for _, b := range e.buckets {
			bs = append(bs, b)
		}
	}
	for _, b := range bs {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b.id},
			TimeElapsed:        durationpb.New(now.Sub(b.lastReport).Truncate(time.Second)),
			NumRequestsAllowed: b.allowed,
			NumRequestsDenied:  b.deny,
		})
		b.allowed, b.deny, b.lastReport = 0, 0, now
	}
	e.mu.Unlock()
	if err := e.stream.Send(msg); err != nil {
		e.t.Logf("report: %v", err)
	}
}

// ended waits for the stream to end and returns its error, nil for an
// end without one.
func (e *fakeEnvoy) ended() error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		e.mu.Lock()
		err := e.streamEr
		e.mu.Unlock()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
	return errors.New("the stream did not end within 10s")
}

// admitted counts the admissions of every bucket in [from, to).
func (e *fakeEnvoy) admitted(from, to time.Time) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, b := range e.buckets {
		for _, at := range b.admittedSpans {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
	}
	return n
}

// assigned returns the rate, per second, of the token bucket in force for
// the bucket id.
func (e *fakeEnvoy) assigned(id map[string]string) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buckets[bucketName(id)]
	if b == nil || b.strategy.GetTokenBucket() == nil || !time.Now().Before(b.expires) {
		return 0
	}
	tb := b.strategy.GetTokenBucket()
	return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
}

// TestQuotaShares: Envoys on two replicas sharing one tenant's limit of
// 1000 per second, over the memory store and Redis: after convergence the
// rates assigned add up to at most the limit (and near it), every Envoy's
// part follows its demand, and what they admit stays within the limit.
func TestQuotaShares(t *testing.T) { onTwoStores(t, runQuotaShares) }

// onTwoStores runs run for two replicas' stores: one memory store both
// share, then two clients of the harness's Redis.
func onTwoStores(t *testing.T, run func(t *testing.T, a, b floodgate.Store)) {
	t.Run("memory", func(t *testing.T) {
		s := memory.New()
		run(t, s, s)
	})
	t.Run("redis", func(t *testing.T) {
		addr := redistest.StandaloneAddr(t)
		open := func() floodgate.Store {
			st, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, KeyPrefix: "fgtest:rlqs:" + t.Name() + ":", Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			return st
		}
		run(t, open(), open())
	})
}

func runQuotaShares(t *testing.T, a, b floodgate.Store) {
	const interval = 500 * time.Millisecond // rounds of 125 ms: writes and reads 31 ms apart, over a loaded machine's late turns
	o := QuotaOptions{Interval: interval}
	addrs := []string{}
	for _, s := range []floodgate.Store{a, b} {
		addr, _ := quotaReplica(t, s, o)
		addrs = append(addrs, addr)
	}
	demands := []float64{200, 400, 600, 800} // requests per second: 2000 for a limit of 1000
	envoys := make([]*fakeEnvoy, len(demands))
	for i := range envoys {
		envoys[i] = dialEnvoy(t, addrs[i%2], "edge")
	}
	id := map[string]string{"tenant": "acme"}
	start := time.Now()
	const run = 6 * time.Second
	var wg sync.WaitGroup
	for i, e := range envoys {
		wg.Go(func() {
			next := start.Add(time.Duration(i) * interval / 4)
			due, last := 0.0, start
			for now := time.Now(); now.Sub(start) < run; now = time.Now() {
				// By the time passed, not the loop's turns: a loaded
				// machine's late turns must not lower the demand.
				due, last = due+demands[i]*now.Sub(last).Seconds(), now
				for ; due >= 1; due-- {
					e.request(id, now)
				}
				if !now.Before(next) {
					e.report(now)
					next = next.Add(interval)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var total float64
	for i, e := range envoys {
		r := e.assigned(id)
		total += r
		t.Logf("envoy %d (demand %v/s): assigned %.1f/s", i, demands[i], r)
		// A share stays while its target is within twice its estimate's
		// noise, and this runs in real time on a machine that may be
		// loaded: a late turn of the loop makes a report noisy.
		if fair := 1000 * demands[i] / 2000; r < 0.85*fair || r > 1.05*fair {
			t.Errorf("envoy %d assigned %.1f/s, want near its fair part %.0f/s", i, r, fair)
		}
	}
	if total > 1000 || total < 930 {
		t.Errorf("the assigned rates add up to %.1f/s; want at most the limit (1000/s) and at least 93%% of it", total)
	}
	from := start.Add(run - 2*time.Second)
	var admitted int
	for _, e := range envoys {
		admitted += e.admitted(from, start.Add(run))
	}
	t.Logf("admitted %d in the last 2s (limit 2000); rates assigned add up to %.1f/s", admitted, total)
	if admitted > 2000*103/100 {
		t.Errorf("admitted %d in 2s, over the limit of 2000 by more than its bursts", admitted)
	}
}

// TestQuotaProtocol: the stream's rules of use. The first report names the
// domain and a change of domain ends the stream; a bucket without a rule
// gets the Unmatched answer, an unlimited rule allow-all, a blocked one
// deny-all, all with the TTL; buckets beyond MaxBuckets or MaxBucketIDBytes
// get the Unmatched answer; the first assignment arrives within two
// intervals; DrainQuota sends TTL 0 and ends the stream.
func TestQuotaProtocol(t *testing.T) {
	addr, svc := quotaReplica(t, memory.New(), QuotaOptions{Interval: 100 * time.Millisecond, TTL: 2 * time.Second,
		Unmatched: "deny_all", MaxBuckets: 3, MaxBucketIDBytes: 64})
	e := dialEnvoy(t, addr, "edge")
	now := time.Now()
	e.request(map[string]string{"tenant": "acme"}, now)
	e.request(map[string]string{"open": "x"}, now)
	e.request(map[string]string{"shut": "x"}, now)
	e.request(map[string]string{"nobody": "x"}, now)                       // no rule
	e.request(map[string]string{"tenant": string(make([]byte, 100))}, now) // over MaxBucketIDBytes
	deadline := time.Now().Add(5 * time.Second)
	want := map[string]string{"tenant=acme;": "token_bucket", "open=x;": "allow_all", "shut=x;": "deny_all", "nobody=x;": "deny_all"}
	for {
		got := map[string]string{}
		e.mu.Lock()
		for _, a := range e.actions {
			name := bucketName(a.GetBucketId().GetBucket())
			st := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
			switch {
			case st.GetTokenBucket() != nil:
				got[name] = "token_bucket"
				if ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != 2*time.Second {
					t.Errorf("%s: TTL %v, want 2s", name, ttl)
				}
				if err := a.ValidateAll(); err != nil {
					t.Errorf("%s: the action fails Envoy's validation: %v", name, err)
				}
			case st.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL:
				got[name] = "allow_all"
			default:
				got[name] = "deny_all"
			}
		}
		e.mu.Unlock()
		if len(got) >= len(want)+1 || time.Now().After(deadline) {
			for k, v := range want {
				if got[k] != v {
					t.Errorf("bucket %s: %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.mu.Lock()
	before := len(e.actions)
	e.mu.Unlock()
	svc.DrainQuota()
	if err := e.ended(); err != nil {
		t.Errorf("the stream after DrainQuota: %v, want it ended OK", err)
	}
	e.mu.Lock()
	zeroed := map[string]bool{}
	for _, a := range e.actions[before:] {
		if a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration() == 0 {
			zeroed[bucketName(a.GetBucketId().GetBucket())] = true
		}
	}
	e.mu.Unlock()
	for k := range want {
		if !zeroed[k] {
			t.Errorf("DrainQuota sent %s no TTL 0 (got %v)", k, zeroed)
		}
	}
	e2 := dialEnvoy(t, addr, "edge")
	_ = e2.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"})
	if err := e2.ended(); status.Code(err) != codes.Unavailable {
		t.Errorf("a stream after DrainQuota: %v, want Unavailable", err)
	}
}

// TestQuotaDomain: a report without a domain first, or naming another
// domain later, ends the stream with InvalidArgument.
func TestQuotaDomain(t *testing.T) {
	addr, _ := quotaReplica(t, memory.New(), QuotaOptions{Interval: 100 * time.Millisecond})
	for _, tc := range []struct {
		name  string
		first string
		then  string
	}{{"no domain", "", ""}, {"domain changed", "edge", "other"}} {
		t.Run(tc.name, func(t *testing.T) {
			e := dialEnvoy(t, addr, tc.first)
			usage := []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "a"}}, NumRequestsAllowed: 1}}
			_ = e.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: tc.first, BucketQuotaUsages: usage})
			if tc.then != "" {
				_ = e.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: tc.then, BucketQuotaUsages: usage})
			}
			if err := e.ended(); status.Code(err) != codes.InvalidArgument {
				t.Errorf("%v, want InvalidArgument", err)
			}
		})
	}
}

// TestQuotaSharedWildcard: bucket ids that a share_threshold wildcard
// matches share the rule's one limit, as they share one counter under
// RLS, across streams and replicas: each stream reports their usage summed
// and splits its share among them by their usage, so the rates assigned
// to every id add up to at most the limit, near it, and each id's follows
// its demand. A wildcard without share_threshold gives each value a limit
// of its own.
func TestQuotaSharedWildcard(t *testing.T) { onTwoStores(t, runQuotaSharedWildcard) }

func runQuotaSharedWildcard(t *testing.T, a, b floodgate.Store) {
	const interval = 100 * time.Millisecond
	o := QuotaOptions{Interval: interval}
	var addrs []string
	for _, s := range []floodgate.Store{a, b} {
		addr, _ := quotaReplica(t, s, o)
		addrs = append(addrs, addr)
	}
	type load struct {
		envoy  int
		id     map[string]string
		demand float64 // requests per second
	}
	// The /api/* values demand 1200/s in all for a shared 600/s; each
	// /own/* value 150/s for 100/s of its own.
	loads := []load{
		{0, map[string]string{"path": "/api/a"}, 100},
		{0, map[string]string{"path": "/api/b"}, 300},
		{1, map[string]string{"path": "/api/a"}, 200},
		{1, map[string]string{"path": "/api/c"}, 600},
		{0, map[string]string{"path": "/own/x"}, 150},
		{1, map[string]string{"path": "/own/y"}, 150},
	}
	envoys := []*fakeEnvoy{dialEnvoy(t, addrs[0], "edge"), dialEnvoy(t, addrs[1], "edge")}
	start := time.Now()
	const run = 3 * time.Second
	var wg sync.WaitGroup
	for i, e := range envoys {
		wg.Go(func() {
			next := start.Add(time.Duration(i) * interval / 2)
			due, last := make([]float64, len(loads)), start
			for now := time.Now(); now.Sub(start) < run; now = time.Now() {
				for j, l := range loads {
					if l.envoy != i {
						continue
					}
					for due[j] += l.demand * now.Sub(last).Seconds(); due[j] >= 1; due[j]-- {
						e.request(l.id, now)
					}
				}
				last = now
				if !now.Before(next) {
					e.report(now)
					next = next.Add(interval)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var shared float64
	for _, l := range loads {
		r := envoys[l.envoy].assigned(l.id)
		fair := 600 * l.demand / 1200
		if strings.HasPrefix(l.id["path"], "/own/") {
			fair = 100
		} else {
			shared += r
		}
		t.Logf("envoy %d %s (demand %v/s): assigned %.1f/s, fair %.0f/s", l.envoy, l.id["path"], l.demand, r, fair)
		if r < 0.85*fair || r > 1.05*fair {
			t.Errorf("envoy %d %s assigned %.1f/s, want near its fair part %.0f/s", l.envoy, l.id["path"], r, fair)
		}
	}
	if shared > 600 || shared < 0.95*600 {
		t.Errorf("the /api/* ids are assigned %.1f/s in all; want at most their shared limit (600/s) and at least 95%% of it", shared)
	}
}
