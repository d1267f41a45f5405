package envoy

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/memory"
)

// env is a running service: a gRPC server on a real loopback listener, a
// client built from the generated code, and the /json handler on an HTTP
// test server.
type env struct {
	svc    *Service
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	reg    *prometheus.Registry
	json   string // the /json URL
	// exact is set when the store runs on a test clock, so durations are
	// known to the microsecond.
	exact bool
}

// start serves rules (YAML sources) over store.
func start(t testing.TB, store floodgate.Store, exact bool, opts Options, yamls ...string) *env {
	t.Helper()
	var srcs []Source
	for i, y := range yamls {
		srcs = append(srcs, Source{Name: fmt.Sprintf("rules%d.yaml", i), Data: []byte(y)})
	}
	var rules *Rules
	if len(srcs) > 0 {
		var err error
		if rules, err = Parse(srcs...); err != nil {
			t.Fatal(err)
		}
	}
	return startRules(t, store, exact, opts, rules)
}

func startRules(t testing.TB, store floodgate.Store, exact bool, opts Options, rules *Rules) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	svc, err := New(store, rules, opts)
	if err != nil {
		t.Fatal(err)
	}
	g, h := NewGRPCServer(svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(svc.JSONHandler())
	t.Cleanup(func() {
		hs.Close()
		_ = conn.Close()
		h.Shutdown()
		g.GracefulStop()
		if err := <-served; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})
	return &env{svc: svc, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, reg: reg, json: hs.URL + "/json", exact: exact}
}

// memoryStore returns a memory store on a manual clock at a whole hour (so
// fixed windows of every unit up to an hour start now).
func memoryStore() (*memory.Store, *clocktest.Manual) {
	clock := newTestClock()
	return memory.New(memory.WithClock(clock)), clock
}

// newTestClock returns a manual clock at midnight UTC.
func newTestClock() *clocktest.Manual {
	return clocktest.NewManual(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
}

// desc builds a descriptor from "key=value" pairs; "key" alone has an empty
// value.
func desc(pairs ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func request(domain string, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// ws is an expected descriptor status.
type ws struct {
	over      bool   // OVER_LIMIT
	limit     string // current_limit as "name rpu/UNIT"; "" for none
	remaining uint32
	// reset is the expected duration_until_reset: 0 for none, anyReset
	// when only its presence is known (it must then be positive and at
	// most the rule's unit).
	reset time.Duration
}

// tieBreak is the slack allowed on an expected duration: a sliding-window
// log keeps requests admitted in the same microsecond one microsecond apart,
// so its durations run a few microseconds past the window.
const tieBreak = time.Millisecond

// anyReset stands for "some duration_until_reset".
const anyReset = time.Duration(-1)

// unlimitedRemaining is the limit_remaining of an unlimited descriptor.
const unlimitedRemaining = math.MaxUint32

func ok(limit string, remaining uint32, reset time.Duration) ws {
	return ws{limit: limit, remaining: remaining, reset: reset}
}

func over(limit string, reset time.Duration) ws {
	return ws{over: true, limit: limit, reset: reset}
}

// noLimit is the status of a descriptor without a rule.
var noLimit = ws{}

func describeLimit(l *rlsv3.RateLimitResponse_RateLimit) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf("%s %d/%s", l.GetName(), l.GetRequestsPerUnit(), l.GetUnit())
}

// checkResponse compares a response with the expected statuses; the
// overall code must be OVER_LIMIT exactly when one status is.
func (e *env) checkResponse(t testing.TB, what string, resp *rlsv3.RateLimitResponse, want []ws) {
	t.Helper()
	wantOverall := rlsv3.RateLimitResponse_OK
	for _, w := range want {
		if w.over {
			wantOverall = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if got := resp.GetOverallCode(); got != wantOverall {
		t.Errorf("%s: overall_code %s, want %s", what, got, wantOverall)
	}
	if len(resp.GetStatuses()) != len(want) {
		t.Fatalf("%s: %d statuses, want %d: %v", what, len(resp.GetStatuses()), len(want), resp)
	}
	for i, st := range resp.GetStatuses() {
		w := want[i]
		wantCode := rlsv3.RateLimitResponse_OK
		if w.over {
			wantCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if st.GetCode() != wantCode {
			t.Errorf("%s: statuses[%d].code %s, want %s", what, i, st.GetCode(), wantCode)
		}
		if got := describeLimit(st.GetCurrentLimit()); got != w.limit {
			t.Errorf("%s: statuses[%d].current_limit %q, want %q", what, i, got, w.limit)
		}
		if st.GetLimitRemaining() != w.remaining {
			t.Errorf("%s: statuses[%d].limit_remaining %d, want %d", what, i, st.GetLimitRemaining(), w.remaining)
		}
		d := st.GetDurationUntilReset()
		switch {
		case w.reset == 0 && d != nil:
			t.Errorf("%s: statuses[%d].duration_until_reset %v, want none", what, i, d.AsDuration())
		case w.reset != 0 && d == nil:
			t.Errorf("%s: statuses[%d].duration_until_reset missing, want %v", what, i, w.reset)
		case w.reset == anyReset || (w.reset > 0 && !e.exact):
			unit := UnitDuration(st.GetCurrentLimit().GetUnit())
			if got := d.AsDuration(); got <= 0 || got >= unit+tieBreak {
				t.Errorf("%s: statuses[%d].duration_until_reset %v, want in (0, %v]", what, i, got, unit)
			}
		case w.reset > 0:
			if got := d.AsDuration(); got < w.reset || got >= w.reset+tieBreak {
				t.Errorf("%s: statuses[%d].duration_until_reset %v, want %v", what, i, got, w.reset)
			}
		}
	}
}

// call sends req and checks the answer.
func (e *env) call(t testing.TB, what string, req *rlsv3.RateLimitRequest, want ...ws) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("%s: ShouldRateLimit: %v", what, err)
	}
	e.checkResponse(t, what, resp, want)
	return resp
}

// counter reads one sample of a counter vector from the registry: the sum
// of the samples whose labels include all of labels ("name=value").
func (e *env) counter(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for _, l := range labels {
				k, v, _ := strings.Cut(l, "=")
				if have[k] != v {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
