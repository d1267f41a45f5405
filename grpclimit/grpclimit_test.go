package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/remotestore"
)

var discard = slog.New(slog.DiscardHandler)

func TestConfigErrors(t *testing.T) {
	ok := floodgate.PerMinute(10)
	cases := []struct {
		name  string
		cfg   grpclimit.Config
		field string
	}{
		{"no store", grpclimit.Config{Rules: []grpclimit.Rule{{Name: "a", Limit: ok}}}, "Store"},
		{"no rules", grpclimit.Config{Store: memory.New()}, "Rules"},
		{"no name", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Limit: ok}}}, "Rules[0].Name"},
		{"bad name", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "é", Limit: ok}}}, "Rules[0].Name"},
		{"duplicate", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok}, {Name: "a", Limit: ok}}}, "Rules[1].Name"},
		{"bad limit", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a"}}}, "Rules[0].Limit"},
		{"bad failure", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, Failure: 7}}}, "Rules[0].Failure"},
		{"share without FailLocal", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, LocalShare: 0.5}}}, "Rules[0].LocalShare"},
		{"message cost over quota", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, MessageCost: 11}}}, "Rules[0].MessageCost"},
		{"negative message cost", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, MessageCost: -1}}}, "Rules[0].MessageCost"},
		{"method without slash", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, Methods: []string{"pkg.Svc/M"}}}}, "Rules[0].Methods[0]"},
		{"method without method", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, Methods: []string{"/pkg.Svc/"}}}}, "Rules[0].Methods[0]"},
		{"method glob", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, Methods: []string{"/pkg.Svc/Get*"}}}}, "Rules[0].Methods[0]"},
		{"service glob", grpclimit.Config{Store: memory.New(), Rules: []grpclimit.Rule{{Name: "a", Limit: ok, Methods: []string{"/pkg.*/M"}}}}, "Rules[0].Methods[0]"},
		{"braces in prefix", grpclimit.Config{Store: memory.New(), KeyPrefix: "{x}", Rules: []grpclimit.Rule{{Name: "a", Limit: ok}}}, "KeyPrefix"},
		{"bad headers", grpclimit.Config{Store: memory.New(), Headers: 9, Rules: []grpclimit.Rule{{Name: "a", Limit: ok}}}, "Headers"},
		{"negative timeout", grpclimit.Config{Store: memory.New(), Timeout: -1, Rules: []grpclimit.Rule{{Name: "a", Limit: ok}}}, "Timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := grpclimit.New(c.cfg)
			var ce *grpclimit.ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field {
				t.Fatalf("New = %v, want a *ConfigError for %s", err, c.field)
			}
		})
	}
}

// TestEngineOptionErrors: the engine's options are checked by decide.New,
// for the gRPC interceptors as for the middleware, named with their values
// as decide names them.
func TestEngineOptionErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  grpclimit.Config
		want string
	}{
		{"negative timeout", grpclimit.Config{Timeout: -time.Millisecond}, "grpclimit: Timeout -1ms must not be negative (0: no deadline of the engine's own: the store bounds each call)"},
		{"negative retry", grpclimit.Config{UnavailableRetryAfter: -time.Second}, "grpclimit: UnavailableRetryAfter -1s must not be negative (0: the default 5s)"},
		{"negative log interval", grpclimit.Config{LogInterval: -time.Second}, "grpclimit: LogInterval -1s must not be negative (0: the default 30s)"},
		{"negative cache entries", grpclimit.Config{OverLimitCache: decide.CacheOptions{MaxEntries: -1}}, "grpclimit: OverLimitCache.MaxEntries -1 must not be negative"},
		{"negative cache bytes", grpclimit.Config{OverLimitCache: decide.CacheOptions{MaxBytes: -5}}, "grpclimit: OverLimitCache.MaxBytes -5 must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Store, tt.cfg.Rules = memory.New(), []grpclimit.Rule{{Name: "a", Limit: floodgate.PerMinute(10)}}
			_, err := grpclimit.New(tt.cfg)
			var ce *grpclimit.ConfigError
			if !errors.As(err, &ce) || err.Error() != tt.want {
				t.Fatalf("New = %v, want the *ConfigError %q", err, tt.want)
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != ce.Field {
				t.Errorf("New = %v, does not wrap a *fielderr.Error for %s", err, ce.Field)
			}
		})
	}
}

// TestUnary: calls over the limit end with ResourceExhausted, the exact
// RetryInfo and a QuotaFailure naming the rule, and every call carries the
// rate-limit metadata.
func TestUnary(t *testing.T) {
	clock := clocktest.NewManual(time.Unix(1_800_000_000, 0))
	lim := newLimiter(t, grpclimit.Config{Store: memory.New(memory.WithClock(clock)), Clock: clock, Logger: discard,
		Rules: []grpclimit.Rule{{Name: "per-peer", Limit: floodgate.PerMinute(3)}}})
	client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{}))
	ctx := t.Context()
	for i := range 3 {
		var header metadata.MD
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		// The reset is the log's oldest entry leaving the window: 60s, or
		// a microsecond more, rounded up.
		want := map[string]string{
			grpclimit.MetadataPolicy:    `^"per-peer";q=3;w=60$`,
			grpclimit.MetadataRateLimit: fmt.Sprintf(`^"per-peer";r=%d;t=6[01]$`, 2-i),
			grpclimit.MetadataLimit:     "^3$",
			grpclimit.MetadataRemaining: fmt.Sprintf("^%d$", 2-i),
			grpclimit.MetadataReset:     "^180000006[01]$",
		}
		for k, v := range want {
			if got := header.Get(k); len(got) != 1 || !regexp.MustCompile(v).MatchString(got[0]) {
				t.Errorf("call %d: header %s = %q, want %s", i+1, k, got, v)
			}
		}
	}
	clock.Advance(20 * time.Second)
	var trailer metadata.MD
	_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("fourth call: %v, want ResourceExhausted", err)
	}
	retry, rule := details(t, err)
	if retry != 40*time.Second || rule != "per-peer" {
		t.Errorf("RetryInfo %s, QuotaFailure rule %q; want exactly 40s and per-peer", retry, rule)
	}
	for k, v := range map[string]string{
		grpclimit.MetadataRateLimit:  `"per-peer";r=0;t=40`,
		grpclimit.MetadataRetryAfter: "40",
		grpclimit.MetadataPushback:   "40000",
		grpclimit.MetadataPolicy:     `"per-peer";q=3;w=60`,
	} {
		if got := trailer.Get(k); len(got) != 1 || got[0] != v {
			t.Errorf("trailer %s = %q, want %q", k, got, v)
		}
	}
	if s := lim.Stats(); s.Denied != 1 {
		t.Errorf("Stats %+v, want 1 denied", s)
	}
}

// TestRetryInfoHonoured: a client that waits the RetryInfo delay before it
// retries is admitted on its first retry, every time; and grpc-go's own
// retry policy, told by the pushback, does the same.
func TestRetryInfoHonoured(t *testing.T) {
	// The client waits the delay on the store's and the limiter's clock,
	// moved by hand: exactly the delay, in no real time.
	clock := clocktest.NewManual(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	lim := newLimiter(t, grpclimit.Config{Store: memory.New(memory.WithClock(clock)), Clock: clock, Logger: discard,
		Rules: []grpclimit.Rule{{Name: "slow", Limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 2, 300*time.Millisecond)}}})
	var denials, retriesAdmitted atomic.Int64
	retrying := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		for attempt := 0; status.Code(err) == codes.ResourceExhausted; attempt++ {
			if attempt == 1 {
				return fmt.Errorf("denied again after waiting the RetryInfo delay: %w", err)
			}
			denials.Add(1)
			delay, _ := details(t, err)
			if delay <= 0 || delay > 300*time.Millisecond {
				return fmt.Errorf("RetryInfo delay %s, want within the window", delay)
			}
			clock.Advance(delay)
			if err = invoker(ctx, method, req, reply, cc, opts...); err == nil {
				retriesAdmitted.Add(1)
			}
		}
		return err
	}
	client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{dial: []grpc.DialOption{grpc.WithUnaryInterceptor(retrying)}}))
	for i := range 8 {
		if _, err := client.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if denials.Load() < 2 || retriesAdmitted.Load() != denials.Load() {
		t.Fatalf("%d denials, %d retries admitted; want at least 2, each retry admitted", denials.Load(), retriesAdmitted.Load())
	}

	// grpc-go's retry policy on ResourceExhausted, with a backoff far
	// shorter than the delay: the pushback makes it wait the delay.
	policy := `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],"retryPolicy":{
		"maxAttempts":2,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,
		"retryableStatusCodes":["RESOURCE_EXHAUSTED"]}}]}`
	lim2 := newLimiter(t, grpclimit.Config{Store: memory.New(), Logger: discard,
		Rules: []grpclimit.Rule{{Name: "slow", Limit: floodgate.NewLimit(floodgate.SlidingWindowLog, 2, 300*time.Millisecond)}}})
	client = testpb.NewTestServiceClient(serve(t, lim2, serveOpts{dial: []grpc.DialOption{grpc.WithDefaultServiceConfig(policy)}}))
	for i := range 8 {
		if _, err := client.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("grpc retry policy, call %d: %v", i+1, err)
		}
	}
	if got := lim2.Stats().Denied; got < 2 {
		t.Fatalf("grpc retry policy: %d denials, want at least 2 (each retried after the pushback)", got)
	}
}

// TestConcurrentStreams: 64 concurrent clients opening 3 streams each
// against a limit of 100 stream starts get exactly 100 streams; and 64
// streams sending 5 messages each against a limit of 50 messages get
// exactly 50 answered.
func TestConcurrentStreams(t *testing.T) {
	const clients = 64
	lim := newLimiter(t, grpclimit.Config{Store: memory.New(), Logger: discard, Rules: []grpclimit.Rule{
		{Name: "starts", Limit: floodgate.PerHour(100), Methods: []string{"/grpc.testing.TestService/FullDuplexCall"}, Key: grpclimit.Metadata("x-tenant")},
		{Name: "messages", Limit: floodgate.PerHour(50), MessageCost: 1, Methods: []string{"/grpc.testing.TestService/FullDuplexCall"}, Key: grpclimit.Metadata("x-uploader")},
	}})
	client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{}))

	// open runs one stream sending n messages under md, and returns how many
	// were answered and the status it ended with.
	open := func(md metadata.MD, n int) (int, error) {
		ctx := metadata.NewOutgoingContext(t.Context(), md)
		stream, err := client.FullDuplexCall(ctx)
		if err != nil {
			return 0, err
		}
		answered := 0
		for range n {
			if err := stream.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				break // the server ended the stream; Recv says why
			}
			if _, err := stream.Recv(); err != nil {
				return answered, err
			}
			answered++
		}
		_ = stream.CloseSend()
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			return answered, err
		}
		return answered, nil
	}

	var started, exhausted, answered atomic.Int64
	var wg sync.WaitGroup
	var unexpected atomic.Value
	for range clients {
		wg.Go(func() {
			for range 3 {
				_, err := open(metadata.Pairs("x-tenant", "acme"), 1)
				switch status.Code(err) {
				case codes.OK:
					started.Add(1)
				case codes.ResourceExhausted:
					exhausted.Add(1)
				default:
					unexpected.Store(err)
				}
			}
		})
	}
	wg.Wait()
	if err := unexpected.Load(); err != nil {
		t.Fatalf("a stream ended with %v", err)
	}
	if started.Load() != 100 || exhausted.Load() != 3*clients-100 {
		t.Fatalf("%d streams started, %d exhausted; want exactly 100 and %d", started.Load(), exhausted.Load(), 3*clients-100)
	}

	exhausted.Store(0)
	for range clients {
		wg.Go(func() {
			n, err := open(metadata.Pairs("x-uploader", "bulk"), 5)
			answered.Add(int64(n))
			switch status.Code(err) {
			case codes.OK:
			case codes.ResourceExhausted:
				exhausted.Add(1)
			default:
				unexpected.Store(err)
			}
		})
	}
	wg.Wait()
	if err := unexpected.Load(); err != nil {
		t.Fatalf("a stream ended with %v", err)
	}
	if answered.Load() != 50 || exhausted.Load() < clients-10 {
		t.Fatalf("%d messages answered, %d streams exhausted; want exactly 50, and at least %d exhausted", answered.Load(), exhausted.Load(), clients-10)
	}
}

// TestFailureModes: an unreachable store fails open or closed as the rule
// says; a store error that is not an outage never admits; a call whose key
// cannot be found (a peer with no IP address) follows the failure mode.
func TestFailureModes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down, err := remotestore.New(remotestore.Config{URL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"status":500,"kind":"store_error","detail":"bad script reply"}`)
	}))
	t.Cleanup(broken.Close)
	failing, err := remotestore.New(remotestore.Config{URL: broken.URL})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		store   floodgate.Store
		mode    grpclimit.FailureMode
		bufconn bool
		want    codes.Code
	}{
		{"outage, fail open", down, grpclimit.FailOpen, false, codes.OK},
		{"outage, fail closed", down, grpclimit.FailClosed, false, codes.Unavailable},
		{"store error, fail open", failing, grpclimit.FailOpen, false, codes.Internal},
		{"store error, fail closed", failing, grpclimit.FailClosed, false, codes.Internal},
		{"no peer address, fail open", memory.New(), grpclimit.FailOpen, true, codes.OK},
		{"no peer address, fail closed", memory.New(), grpclimit.FailClosed, true, codes.Unavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var errs atomic.Int64
			lim := newLimiter(t, grpclimit.Config{Store: c.store, Logger: discard, UnavailableRetryAfter: 7 * time.Second,
				OnStoreError: func(context.Context, string, error) { errs.Add(1) },
				Rules:        []grpclimit.Rule{{Name: "r", Limit: floodgate.PerMinute(5), Failure: c.mode}}})
			client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{bufconn: c.bufconn}))
			var trailer metadata.MD
			_, err := client.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
			if got := status.Code(err); got != c.want {
				t.Fatalf("call: %v, want %s", err, c.want)
			}
			if c.want == codes.Unavailable {
				if retry, _ := details(t, err); retry != 7*time.Second {
					t.Errorf("RetryInfo %s, want the UnavailableRetryAfter 7s", retry)
				}
				if got := trailer.Get(grpclimit.MetadataRetryAfter); len(got) != 1 || got[0] != "7" {
					t.Errorf("retry-after trailer %q, want 7", got)
				}
			}
			if errs.Load() != 1 {
				t.Errorf("OnStoreError called %d times, want 1", errs.Load())
			}
		})
	}
}

// TestSkip: the health and reflection services are skipped by default
// (and by SkipHealthAndReflection), and limited under SkipNone, as every
// other call is.
func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		skip       func(context.Context, string) bool
		wantDenied int
	}{
		{"nil", nil, 0},
		{"SkipHealthAndReflection", grpclimit.SkipHealthAndReflection, 0},
		{"SkipNone", grpclimit.SkipNone, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := grpclimit.Config{Store: memory.New(), Logger: discard, Skip: tc.skip, Rules: []grpclimit.Rule{{Name: "all", Limit: floodgate.PerHour(1)}}}
			lim := newLimiter(t, cfg)
			cc := serve(t, lim, serveOpts{register: func(s *grpc.Server) {
				healthpb.RegisterHealthServer(s, healthgrpc.NewServer())
				reflection.Register(s)
			}})
			health := healthpb.NewHealthClient(cc)
			var denied int
			for range 3 {
				if _, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) == codes.ResourceExhausted {
					denied++
				} else if err != nil {
					t.Fatal(err)
				}
			}
			refl, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			_ = refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			if _, err := refl.Recv(); status.Code(err) == codes.ResourceExhausted {
				denied++
			} else if err != nil {
				t.Fatal(err)
			}
			if denied != tc.wantDenied || lim.Stats().Denied != uint64(tc.wantDenied) {
				t.Fatalf("%d health and reflection calls denied (stats %+v), want %d", denied, lim.Stats(), tc.wantDenied)
			}
		})
	}
}

// TestCacheHits: a key over its limit is denied from the over-limit cache
// until its retry delay, and Stats counts those denials apart, as
// httplimit's do. The store is a real Redis: the cache stays off over the
// memory store, which denies as fast.
func TestCacheHits(t *testing.T) {
	store, err := redisstore.New(redisstore.Config{Addrs: []string{redistest.StandaloneAddr(t)},
		KeyPrefix: fmt.Sprintf("grpclimit-cache-test:%d:", time.Now().UnixNano()), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	for _, tc := range []struct {
		name          string
		noCache       bool
		wantCacheHits uint64
	}{{"cached", false, 2}, {"NoCache", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newLimiter(t, grpclimit.Config{Store: store, Logger: discard,
				Rules: []grpclimit.Rule{{Name: tc.name, Limit: floodgate.PerHour(1), NoCache: tc.noCache}}})
			client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{}))
			for i := range 4 {
				_, err := client.UnaryCall(t.Context(), &testpb.SimpleRequest{})
				if (i == 0) != (err == nil) || i > 0 && status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			if st := lim.Stats(); st.Denied != 3 || st.CacheHits != tc.wantCacheHits {
				t.Fatalf("stats %+v, want 3 denied, %d of them from the cache", st, tc.wantCacheHits)
			}
		})
	}
}

// TestShadow: a shadow rule never denies and never reaches the metadata;
// its would-be denials are reported.
func TestShadow(t *testing.T) {
	var shadowDenied atomic.Int64
	lim := newLimiter(t, grpclimit.Config{Store: memory.New(), Logger: discard,
		OnShadowDeny: func(context.Context, string, floodgate.Decision) { shadowDenied.Add(1) },
		Rules: []grpclimit.Rule{
			{Name: "trial", Limit: floodgate.PerHour(1), Shadow: true},
			{Name: "real", Limit: floodgate.PerHour(100)},
		}})
	client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{}))
	for i := range 4 {
		var header metadata.MD
		if _, err := client.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Header(&header)); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got := header.Get(grpclimit.MetadataPolicy); len(got) != 1 || got[0] != `"real";q=100;w=3600` {
			t.Errorf("call %d: policy %q, want the enforced rule's only", i+1, got)
		}
	}
	if shadowDenied.Load() != 3 || lim.Stats().ShadowDenied != 3 {
		t.Fatalf("shadow denials %d (stats %+v), want 3", shadowDenied.Load(), lim.Stats())
	}
}

// TestPeerKeys: x-forwarded-for is believed only from a trusted peer, and
// IPv6 clients share their /64.
func TestPeerKeys(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprint("trusted=", trusted), func(t *testing.T) {
			r := clientip.Resolver{}
			if trusted {
				r.TrustedProxies = []string{"127.0.0.1"}
			}
			e, err := clientip.New(r)
			if err != nil {
				t.Fatal(err)
			}
			lim := newLimiter(t, grpclimit.Config{Store: memory.New(), Logger: discard, ClientIP: e,
				Rules: []grpclimit.Rule{{Name: "per-ip", Limit: floodgate.PerHour(2)}}})
			client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{}))
			admitted := 0
			for _, xff := range []string{"203.0.113.1", "203.0.113.2", "198.51.100.9, 203.0.113.3", "2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3"} {
				ctx := metadata.AppendToOutgoingContext(t.Context(), "x-forwarded-for", xff)
				if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err == nil {
					admitted++
				} else if status.Code(err) != codes.ResourceExhausted {
					t.Fatal(err)
				}
			}
			// Trusted: three IPv4 clients (2 each) and one IPv6 /64 (2 of
			// 3). Untrusted: everything is the loopback peer.
			if want := map[bool]int{false: 2, true: 5}[trusted]; admitted != want {
				t.Fatalf("admitted %d, want %d", admitted, want)
			}
		})
	}
}

type identityKey struct{}

// TestIdentityAndMethods: a rule keyed by the identity an earlier
// interceptor authenticated, on one method only.
func TestIdentityAndMethods(t *testing.T) {
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if u := md.Get("authorization"); len(u) == 1 {
			ctx = context.WithValue(ctx, identityKey{}, strings.TrimPrefix(u[0], "user "))
		}
		return handler(ctx, req)
	}
	lim := newLimiter(t, grpclimit.Config{Store: memory.New(), Logger: discard, Rules: []grpclimit.Rule{
		{Name: "per-user", Limit: floodgate.PerHour(2), Key: grpclimit.ContextValue(identityKey{}), Methods: []string{"/grpc.testing.TestService/UnaryCall"}},
	}})
	client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{unary: []grpc.UnaryServerInterceptor{auth}}))
	count := func(user string, call func(context.Context) error) (admitted int) {
		ctx := t.Context()
		if user != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "user "+user)
		}
		for range 4 {
			if err := call(ctx); err == nil {
				admitted++
			} else if status.Code(err) != codes.ResourceExhausted {
				t.Fatal(err)
			}
		}
		return admitted
	}
	unary := func(ctx context.Context) error { _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); return err }
	empty := func(ctx context.Context) error { _, err := client.EmptyCall(ctx, &testpb.Empty{}); return err }
	for _, c := range []struct {
		user string
		call func(context.Context) error
		want int
	}{
		{"alice", unary, 2}, {"bob", unary, 2}, {"alice", empty, 4}, {"", unary, 4},
	} {
		if got := count(c.user, c.call); got != c.want {
			t.Errorf("user %q: admitted %d of 4, want %d", c.user, got, c.want)
		}
	}
}

// TestFailLocal: with the store unreachable, a FailLocal rule keeps
// limiting in this process at its share of the limit: of 10 calls under a
// limit of 8 with a share of 0.5, exactly 4 pass, the rest are
// ResourceExhausted with a RetryInfo.
func TestFailLocal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down, err := remotestore.New(remotestore.Config{URL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	lim := newLimiter(t, grpclimit.Config{Store: down, Logger: discard,
		Rules: []grpclimit.Rule{{Name: "r", Limit: floodgate.PerMinute(8), Failure: grpclimit.FailLocal, LocalShare: 0.5}}})
	client := testpb.NewTestServiceClient(serve(t, lim, serveOpts{}))
	passed, denied := 0, 0
	for range 10 {
		var header, trailer metadata.MD
		_, err := client.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		md := metadata.Join(header, trailer)
		// Every answer says it was decided locally, and describes the local 4.
		if got := md.Get(grpclimit.MetadataFallback); len(got) != 1 || got[0] != "local" || md.Get(grpclimit.MetadataLimit)[0] != "4" {
			t.Errorf("metadata %v, want floodgate-fallback: local and the local limit 4", md)
		}
		switch status.Code(err) {
		case codes.OK:
			passed++
		case codes.ResourceExhausted:
			denied++
			if retry, _ := details(t, err); retry <= 0 || retry > time.Minute {
				t.Errorf("RetryInfo %s, want a delay within the minute", retry)
			}
			st, _ := status.FromError(err)
			for _, d := range st.Details() {
				if qf, ok := d.(*errdetails.QuotaFailure); ok {
					if v := qf.GetViolations()[0]; v.GetQuotaValue() != 4 || !strings.Contains(v.GetDescription(), "this instance's share") {
						t.Errorf("QuotaFailure %v, want the local quota 4", v)
					}
				}
			}
		default:
			t.Fatalf("call: %v", err)
		}
	}
	if passed != 4 || denied != 6 {
		t.Fatalf("%d passed, %d denied; want 4 and 6 (half of 8, decided locally)", passed, denied)
	}
	if got := lim.Stats().LocalFallback; got != 10 {
		t.Errorf("Stats.LocalFallback %d, want 10", got)
	}
}

// TestTimeoutBelowStore: a Timeout at or above the store's own per-call
// timeout is an error of New naming both, as httplimit's is.
func TestTimeoutBelowStore(t *testing.T) {
	store, err := remotestore.New(remotestore.Config{URL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	rules := []grpclimit.Rule{{Name: "r", Limit: floodgate.PerMinute(1)}}
	_, err = grpclimit.New(grpclimit.Config{Store: store, Rules: rules, Timeout: 100 * time.Millisecond})
	const want = "grpclimit: Timeout 100ms must be below the store's own per-call timeout, 100ms (the Timeout of its *remotestore.Store), which would end every call first: set it below 100ms, or to 0 to let the store bound each call"
	var ce *grpclimit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Timeout" || err.Error() != want {
		t.Fatalf("New = %v\nwant the *ConfigError %s", err, want)
	}
	if _, err := grpclimit.New(grpclimit.Config{Store: store, Rules: rules, Timeout: 80 * time.Millisecond}); err != nil {
		t.Fatalf("a Timeout below the store's: %v", err)
	}
}
