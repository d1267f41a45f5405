// Package frontendtest holds the test that ties the front ends together: the
// same rules and the same request sequence through the net/http middleware,
// the gRPC interceptors, the middleware on the remote store (through a
// server's store API), the server's API, its forward auth and Envoy's
// rate-limit service must give the same decisions and byte-identical
// rate-limit headers (metadata, for gRPC), on the memory store and on real
// Redis. The failure sequence does the same while the store is down (an
// outage) or broken (an error that is not an outage), under rules that fail
// open, closed and local, and shadow rules: the same verdict (status, gRPC
// code, Envoy's overall code or failed call, mapped once where a protocol
// answers differently by design), the same headers and Floodgate-Fallback.
//
// It is a document test room: tests only, with no code of their own.
package frontendtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/server"
)

// rule is one rule, as each front end is configured with it.
type rule struct {
	name    string
	limit   floodgate.Limit
	shadow  bool
	failure decide.FailureMode // what an outage of the store means
	share   float64            // the local share, under decide.FailLocal
	lease   *decide.LeaseOptions
}

// The rules, as each front end is configured with them.
var rules = []rule{
	{name: "login", limit: floodgate.PerMinute(3)},
	{name: "api", limit: floodgate.NewTokenBucket(5, 5, time.Minute)},
	{name: "burst", limit: floodgate.NewLimit(floodgate.FixedWindow, 4, time.Minute)},
	{name: "trial", limit: floodgate.NewLimit(floodgate.SlidingWindowCounter, 1, time.Minute), shadow: true},
}

const envoyRules = `domain: fe
response_headers: true
descriptors:
  - key: login
    rate_limit: {name: login, unit: minute, requests_per_unit: 3, algorithm: sliding_window_log}
  - key: api
    rate_limit: {name: api, unit: minute, requests_per_unit: 5, algorithm: token_bucket}
  - key: burst
    rate_limit: {name: burst, unit: minute, requests_per_unit: 4, algorithm: fixed_window}
  - key: trial
    shadow_mode: true
    rate_limit: {name: trial, unit: minute, requests_per_unit: 1, algorithm: sliding_window_counter}
`

// allShadow returns the rules with every one in shadow mode.
func allShadow() []rule {
	out := slices.Clone(rules)
	for i := range out {
		out[i].shadow = true
	}
	return out
}

// envoyShadowRules is envoyRules with every descriptor in shadow_mode (or,
// with mode "quota_mode", in quota_mode instead).
func envoyShadowRules(mode string) string {
	return strings.ReplaceAll(strings.ReplaceAll(envoyRules, "    shadow_mode: true\n", ""),
		"    rate_limit:", "    "+mode+": true\n    rate_limit:")
}

// cacheOpts is every front end's over-limit cache: entries last their
// retry delay, as the sequences expect, whether or not an engine hears its
// store's change channel (the test's stores have none, or it runs on real
// time while the sequence's clock jumps).
var cacheOpts = decide.CacheOptions{MaxAge: 24 * time.Hour}

// compared are the headers (gRPC metadata, by the same names) every front
// end must send alike: the rate-limit headers, and Floodgate-Fallback, which
// says a rule was decided locally while the store was unavailable.
var compared = append(ratelimitheader.Order[:], ratelimitheader.HeaderFallback)

// verdict is a front end's answer in common terms: its protocol's status
// (HTTP status, gRPC code, Envoy's overall code) mapped to what the engine
// decided.
type verdict string

// The verdicts.
const (
	admitted    verdict = "admitted"    // 2xx, OK
	denied      verdict = "denied"      // 429, RESOURCE_EXHAUSTED, OVER_LIMIT
	unavailable verdict = "unavailable" // 503, UNAVAILABLE: a fail-closed rule's outage
	storeError  verdict = "store error" // 500, INTERNAL: never admitted
)

// answer is what a front end said about one request.
type answer struct {
	verdict verdict
	headers map[string]string // the compared headers, by canonical name
}

func (a answer) admitted() bool { return a.verdict == admitted }

func (a answer) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", a.verdict)
	for _, k := range compared {
		if v, ok := a.headers[k]; ok {
			fmt.Fprintf(&b, " %s=%q", k, v)
		}
	}
	return b.String()
}

func fromHeader(v verdict, h http.Header) answer {
	a := answer{verdict: v, headers: map[string]string{}}
	for _, k := range compared {
		if v := h.Values(k); len(v) > 0 {
			a.headers[k] = strings.Join(v, ",")
		}
	}
	return a
}

// httpVerdict maps an HTTP front end's status to its verdict: ok is its
// status for an admitted request (the middleware's handler answers 204);
// any status but the four is the test's failure.
func httpVerdict(t *testing.T, name string, code, ok int, body fmt.Stringer) verdict {
	t.Helper()
	switch code {
	case ok:
		return admitted
	case http.StatusTooManyRequests:
		return denied
	case http.StatusServiceUnavailable:
		return unavailable
	case http.StatusInternalServerError:
		return storeError
	}
	t.Fatalf("%s: status %d: %s", name, code, body)
	return ""
}

// grpcVerdict maps a gRPC status code to its verdict; any other code is the
// test's failure.
func grpcVerdict(t *testing.T, name string, err error) verdict {
	t.Helper()
	switch status.Code(err) {
	case codes.OK:
		return admitted
	case codes.ResourceExhausted:
		return denied
	case codes.Unavailable:
		return unavailable
	case codes.Internal:
		return storeError
	}
	t.Fatalf("%s: %v", name, err)
	return ""
}

// frontEnd sends one request applying the named rules, for the client
// numbered client.
type frontEnd struct {
	name   string
	multi  bool // can apply several rules to one request
	decide func(t *testing.T, client int, rules []string) answer
	// expect, if set, maps the answer of the other front ends to a step
	// to this one's, where it differs by design (Envoy's failure modes).
	expect func(st step, want answer) answer
}

// frontEnds returns every front end, each with its own store, configured
// with rules, and Envoy's service once per entry of envoys.
func frontEnds(t *testing.T, newStore func(name string) floodgate.Store, clock floodgate.Clock, rules []rule, envoys []envoyFrontEnd) []frontEnd {
	t.Helper()
	discard := slog.New(slog.DiscardHandler)

	// The middleware: each rule keyed by its own request header, so a
	// request names the rules that apply to it.
	var mwRules []httplimit.Rule
	var srvRules []server.Rule
	for _, r := range rules {
		mwRules = append(mwRules, httplimit.Rule{Name: r.name, Limit: r.limit, Shadow: r.shadow, Failure: r.failure, LocalShare: r.share,
			Lease: r.lease, Key: httplimit.Header("X-" + r.name)})
		srvRules = append(srvRules, server.Rule{Name: r.name, Limit: r.limit, Shadow: r.shadow, Failure: r.failure, LocalShare: r.share, Lease: r.lease})
	}
	lim, err := httplimit.New(httplimit.Config{Store: newStore("mw"), Rules: mwRules, Clock: clock, Logger: discard, OverLimitCache: cacheOpts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close(context.Background()) })
	mw := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))

	srv, err := server.New(newStore("api"), server.Policy{Rules: srvRules}, server.Options{Clock: clock, Logger: discard, OverLimitCache: cacheOpts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	api := srv.Handler()
	fa, err := server.New(newStore("fa"), server.Policy{Rules: srvRules}, server.Options{Clock: clock, Logger: discard, OverLimitCache: cacheOpts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fa.Close(context.Background()) })
	faHandler := fa.Handler()

	// Envoy's service keeps the over-limit cache off unless asked, as the
	// reference does; the other front ends have it on: on here too, so
	// every front end answers a repeated denial alike. The peer's headers
	// (LIMIT_RESPONSE_HEADERS_ENABLED) are on as well: they have no
	// counterpart in the other front ends, but must never describe a
	// shadow rule either.
	envoys = slices.Clone(envoys)
	for i := range envoys {
		e := &envoys[i]
		envRules, err := envoy.Parse(envoy.Source{Name: "fe.yaml", Data: []byte(e.rules)})
		if err != nil {
			t.Fatal(err)
		}
		opts := e.opts
		opts.Clock, opts.Logger, opts.PeerHeaders = clock, discard, &envoy.PeerHeaders{}
		opts.OverLimitCache = decide.CacheOptions{MaxEntries: decide.DefaultCacheEntries, MaxAge: cacheOpts.MaxAge}
		if e.svc, err = envoy.New(newStore(e.name), envRules, opts); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.svc.Close(context.Background()) })
	}

	grpcClient := grpcFrontEnd(t, newStore("grpc"), clock, rules)

	// The middleware again, deciding through the remote store with a
	// server's store API (the server's store follows the test's clock, as
	// the others do).
	storeSrv, err := server.New(newStore("remote"), server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	storeAPI := httptest.NewServer(storeSrv.Handler())
	t.Cleanup(storeAPI.Close)
	remote, err := remotestore.New(remotestore.Config{URL: storeAPI.URL, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remote.Close)
	remoteLim, err := httplimit.New(httplimit.Config{Store: remote, Rules: mwRules, Clock: clock, Logger: discard, OverLimitCache: cacheOpts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remoteLim.Close(context.Background()) })
	remoteMW := remoteLim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))

	fes := []frontEnd{
		{name: "grpc interceptor", multi: true, decide: func(t *testing.T, client int, names []string) answer {
			var pairs []string
			for _, n := range names {
				pairs = append(pairs, "x-"+n, fmt.Sprint("client-", client))
			}
			ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(pairs...))
			var header, trailer metadata.MD
			_, err := grpcClient.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&header), grpc.Trailer(&trailer))
			v := grpcVerdict(t, "grpc interceptor", err)
			h := http.Header{}
			for _, md := range []metadata.MD{header, trailer} {
				for _, k := range compared {
					for _, v := range md.Get(k) {
						h.Add(k, v)
					}
				}
			}
			return fromHeader(v, h)
		}},
		{name: "middleware", multi: true, decide: func(t *testing.T, client int, names []string) answer {
			r := httptest.NewRequest(http.MethodGet, "http://app.example/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			for _, n := range names {
				r.Header.Set("X-"+n, fmt.Sprint("client-", client))
			}
			w := httptest.NewRecorder()
			mw.ServeHTTP(w, r)
			return fromHeader(httpVerdict(t, "middleware", w.Code, http.StatusNoContent, w.Body), w.Header())
		}},
		{name: "middleware on remotestore", multi: true, decide: func(t *testing.T, client int, names []string) answer {
			r := httptest.NewRequest(http.MethodGet, "http://app.example/", nil)
			for _, n := range names {
				r.Header.Set("X-"+n, fmt.Sprint("client-", client))
			}
			w := httptest.NewRecorder()
			remoteMW.ServeHTTP(w, r)
			return fromHeader(httpVerdict(t, "middleware on remotestore", w.Code, http.StatusNoContent, w.Body), w.Header())
		}},
		{name: "server API", multi: false, decide: func(t *testing.T, client int, names []string) answer {
			body, _ := json.Marshal(map[string]any{"rule": names[0], "key": fmt.Sprint("client-", client)})
			r := httptest.NewRequest(http.MethodPost, "http://floodgate/v1/check", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			api.ServeHTTP(w, r)
			return fromHeader(httpVerdict(t, "server API", w.Code, http.StatusOK, w.Body), w.Header())
		}},
		{name: "forward auth", multi: false, decide: func(t *testing.T, client int, names []string) answer {
			r := httptest.NewRequest(http.MethodGet, "http://floodgate/v1/forward-auth?rule="+names[0], nil)
			r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", client)
			w := httptest.NewRecorder()
			faHandler.ServeHTTP(w, r)
			return fromHeader(httpVerdict(t, "forward auth", w.Code, http.StatusOK, w.Body), w.Header())
		}},
	}
	for _, e := range envoys {
		fes = append(fes, frontEnd{name: e.name, multi: true, decide: e.decide(rules), expect: e.expect})
	}
	return fes
}

// envoyFrontEnd is Envoy's rate-limit service under one rule file and
// options.
type envoyFrontEnd struct {
	name  string
	rules string // the rule file
	opts  envoy.Options
	svc   *envoy.Service
	// expect maps the other front ends' answer to a step to this one's,
	// where it differs by design.
	expect func(st step, want answer) answer
}

// decide asks the service about a request whose descriptors name rules,
// and checks the peer's headers (RateLimit-Limit, -Remaining, -Reset)
// never describe a shadow rule: they describe the enforced rule with the
// least remaining, or none when no enforced rule applied.
func (e *envoyFrontEnd) decide(rules []rule) func(t *testing.T, client int, names []string) answer {
	return func(t *testing.T, client int, names []string) answer {
		req := &rlsv3.RateLimitRequest{Domain: "fe"}
		for _, n := range names {
			req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: n, Value: fmt.Sprint("client-", client)}}})
		}
		resp, err := e.svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			// A failed call carries no response headers.
			return fromHeader(grpcVerdict(t, e.name, err), nil)
		}
		h := http.Header{}
		for _, hv := range resp.GetResponseHeadersToAdd() {
			h.Add(hv.GetKey(), hv.GetValue())
		}
		// The peer's limit is requests_per_unit: enforced ones only.
		var limits []string
		for i, n := range names {
			r := rules[slices.IndexFunc(rules, func(r rule) bool { return r.name == n })]
			if !r.shadow && !e.opts.ShadowMode && !e.opts.QuotaMode {
				limits = append(limits, fmt.Sprint(resp.GetStatuses()[i].GetCurrentLimit().GetRequestsPerUnit()))
				if r.share > 0 { // decided locally, at its share
					limits = append(limits, fmt.Sprint(int64(float64(r.limit.Quota)*r.share)))
				}
			}
		}
		switch got := h.Get("RateLimit-Limit"); {
		case got == "" && h.Get(ratelimitheader.HeaderLimit) == "":
			// Nothing decided (an outage of fail-open rules): no figures
			// in either, which the comparison with the other front ends
			// checks.
		case len(limits) == 0 && len(h.Values("RateLimit-Limit")) != 0:
			t.Errorf("%s %v: RateLimit-Limit %q without an enforced rule: a shadow rule reached the peer's headers", e.name, names, got)
		case len(limits) > 0 && !slices.Contains(limits, got):
			t.Errorf("%s %v: RateLimit-Limit %q, not one of the enforced rules' %v: a shadow rule reached the peer's headers", e.name, names, got, limits)
		}
		v := denied
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			v = admitted
		}
		return fromHeader(v, h)
	}
}

// emptyService answers the grpc_testing TestService's EmptyCall.
type emptyService struct {
	testpb.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

// grpcFrontEnd serves the test service behind the gRPC interceptors, each
// rule keyed by its own metadata, over an in-memory listener.
func grpcFrontEnd(t *testing.T, store floodgate.Store, clock floodgate.Clock, rules []rule) testpb.TestServiceClient {
	t.Helper()
	var gRules []grpclimit.Rule
	for _, r := range rules {
		gRules = append(gRules, grpclimit.Rule{Name: r.name, Limit: r.limit, Shadow: r.shadow, Failure: r.failure, LocalShare: r.share,
			Lease: r.lease, Key: grpclimit.Metadata("x-" + r.name)})
	}
	lim, err := grpclimit.New(grpclimit.Config{Store: store, Rules: gRules, Clock: clock, Logger: slog.New(slog.DiscardHandler), OverLimitCache: cacheOpts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close(context.Background()) })
	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary))
	testpb.RegisterTestServiceServer(srv, emptyService{})
	ln := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// step is one request of the sequence, after the clock moved by advance.
type step struct {
	advance time.Duration
	rules   []string
	client  int // 0: client 1 for one rule, 2 for several
}

func repeat(n int, s step) []step {
	out := []step{s}
	for range n - 1 {
		out = append(out, step{rules: s.rules})
	}
	return out
}

// sequence exercises every algorithm up to and past its limit, shadow rules
// alone and beside enforced ones, several rules per request, and windows
// moving on (every store follows the test's clock).
func sequence() []step {
	var s []step
	s = append(s, repeat(4, step{rules: []string{"login"}})...)
	s = append(s, repeat(7, step{advance: 3 * time.Second, rules: []string{"api"}})...)
	s = append(s, repeat(6, step{rules: []string{"burst"}})...)
	s = append(s, repeat(3, step{rules: []string{"trial"}})...)
	s = append(s, step{advance: 61 * time.Second, rules: []string{"login"}})
	s = append(s, repeat(3, step{advance: time.Second, rules: []string{"burst"}})...)
	// Several rules per request (middleware and Envoy only), on other
	// clients.
	s = append(s, repeat(4, step{rules: []string{"login", "api", "trial"}})...)
	s = append(s, repeat(6, step{rules: []string{"api", "burst"}})...)
	return s
}

// ask sends one step to every front end and compares their answers: the
// answer most of the front ends without an expect mapping gave (the first
// of them on a tie) is the reference, and every front end must give it, as
// its expect maps it. It returns the reference.
func ask(t *testing.T, fes []frontEnd, i int, st step) answer {
	t.Helper()
	client := st.client
	switch {
	case client != 0:
	case len(st.rules) > 1:
		client = 2
	default:
		client = 1
	}
	type reply struct {
		fe  frontEnd
		got answer
	}
	var replies []reply
	votes := map[string]int{}
	for _, fe := range fes {
		if len(st.rules) > 1 && !fe.multi {
			continue
		}
		got := fe.decide(t, client, st.rules)
		replies = append(replies, reply{fe, got})
		if fe.expect == nil {
			votes[got.String()]++
		}
	}
	var want answer
	var wantFrom string
	for _, r := range replies {
		if r.fe.expect == nil && (wantFrom == "" || votes[r.got.String()] > votes[want.String()]) {
			want, wantFrom = r.got, r.fe.name
		}
	}
	for _, r := range replies {
		exp := want
		if r.fe.expect != nil {
			exp = r.fe.expect(st, want)
		}
		if r.got.String() != exp.String() {
			t.Errorf("step %d %v: %s answered\n\t%s\nbut %s (and %d more of %d) answered\n\t%s\nwhich means, for %s,\n\t%s",
				i, st.rules, r.fe.name, r.got, wantFrom, votes[want.String()]-1, len(replies), want, r.fe.name, exp)
		}
	}
	if testing.Verbose() {
		t.Logf("step %d %v: %s", i, st.rules, want)
	}
	return want
}

// run sends the sequence to every front end and compares their answers.
// With shadow, every rule is a shadow rule, and Envoy comes four times: rule
// files with shadow_mode or quota_mode on every descriptor, and the enforced
// rule file under the global SHADOW_MODE or QUOTA_MODE: every request is
// admitted without a header. In every step, no header names a shadow rule or
// carries its limit.
func run(t *testing.T, newStore func(name string) floodgate.Store, clock *clocktest.Manual, shadow bool) {
	rules := rules
	envoys := []envoyFrontEnd{{name: "envoy", rules: envoyRules}}
	if shadow {
		rules = allShadow()
		envoys = []envoyFrontEnd{
			{name: "envoy shadow_mode", rules: envoyShadowRules("shadow_mode")},
			{name: "envoy SHADOW_MODE", rules: envoyRules, opts: envoy.Options{ShadowMode: true}},
			{name: "envoy quota_mode", rules: envoyShadowRules("quota_mode")},
			{name: "envoy QUOTA_MODE", rules: envoyRules, opts: envoy.Options{QuotaMode: true}},
		}
	}
	fes := frontEnds(t, newStore, clock, rules, envoys)
	nDenied := 0
	for i, st := range sequence() {
		clock.Advance(st.advance)
		want := ask(t, fes, i, st)
		if err := noShadow(rules, st.rules, want); err != "" {
			t.Errorf("step %d %v: %s: %s", i, st.rules, err, want)
		}
		if _, ok := want.headers[ratelimitheader.HeaderFallback]; ok {
			t.Errorf("step %d %v: %s without an outage: %s", i, st.rules, ratelimitheader.HeaderFallback, want)
		}
		switch want.verdict {
		case denied:
			nDenied++
		case admitted:
		default:
			t.Errorf("step %d %v: %s without an outage", i, st.rules, want)
		}
		if i == 3 && want.admitted() != shadow {
			t.Fatalf("step 3: the fourth login request: %s", want)
		}
	}
	// The sequence runs every rule past its limit: login once, api twice,
	// burst twice, the three-rule request once, the two-rule request four
	// times. Shadow rules deny nothing.
	wantDenied := 10
	if shadow {
		wantDenied = 0
	}
	if nDenied != wantDenied {
		t.Errorf("%d requests denied, want %d", nDenied, wantDenied)
	}
}

// noShadow says what is wrong if an answer's headers show a shadow rule
// among the named ones: none may name it, and X-RateLimit-Limit must be an
// enforced rule's quota; without an enforced rule, no header at all.
func noShadow(rules []rule, names []string, a answer) string {
	var quotas []string
	for _, n := range names {
		r := rules[slices.IndexFunc(rules, func(r rule) bool { return r.name == n })]
		if !r.shadow {
			quotas = append(quotas, fmt.Sprint(r.limit.Quota))
			if r.share > 0 { // decided locally, at its share
				quotas = append(quotas, fmt.Sprint(int64(float64(r.limit.Quota)*r.share)))
			}
			continue
		}
		for k, v := range a.headers {
			if strings.Contains(v, `"`+r.name+`"`) {
				return fmt.Sprintf("the shadow rule %s in %s", r.name, k)
			}
		}
	}
	switch l, ok := a.headers[ratelimitheader.HeaderLimit]; {
	case len(quotas) == 0 && len(a.headers) != 0:
		return "headers without an enforced rule"
	case ok && !slices.Contains(quotas, l):
		return fmt.Sprintf("%s %s is no enforced rule's quota (%v)", ratelimitheader.HeaderLimit, l, quotas)
	}
	return ""
}

// modes runs f for the enforced rules and for all of them in shadow mode.
func modes(t *testing.T, f func(t *testing.T, shadow bool)) {
	for _, shadow := range []bool{false, true} {
		name := "enforced"
		if shadow {
			name = "shadow"
		}
		t.Run(name, func(t *testing.T) { f(t, shadow) })
	}
}

func TestSameAnswerMemory(t *testing.T) {
	modes(t, func(t *testing.T, shadow bool) {
		clock := clocktest.NewManual(time.Unix(1_800_000_000, 0))
		run(t, func(string) floodgate.Store { return memory.New(memory.WithClock(clock)) }, clock, shadow)
	})
}

func TestSameAnswerRedis(t *testing.T) {
	modes(t, func(t *testing.T, shadow bool) {
		runRedis(t, redisstore.ModeStandalone, []string{redistest.StandaloneAddr(t)}, shadow)
	})
}

// TestSameAnswerRedisCluster runs the sequence on a 3+3 cluster, where a
// request's checks live in several slots: one pipelined round trip, and
// refunds across slots when one denies.
func TestSameAnswerRedisCluster(t *testing.T) {
	modes(t, func(t *testing.T, shadow bool) {
		runRedis(t, redisstore.ModeCluster, redistest.ClusterAddrs(t), shadow)
	})
}

func runRedis(t *testing.T, mode redisstore.Mode, addrs []string, shadow bool) {
	prefix := fmt.Sprintf("fe-%d:", time.Now().UnixNano())
	clock := clocktest.NewManual(time.Unix(1_800_000_000, 0))
	run(t, func(name string) floodgate.Store {
		// The store takes its time from the test's clock, as every front
		// end does: decisions and header values are then exact, where
		// Redis's TIME would move on between the front ends' calls and
		// make a retry round up to another second now and then.
		s, err := redisstore.New(redisstore.Config{Mode: mode, Addrs: addrs, KeyPrefix: prefix + name + ":", Timeout: time.Second, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}, clock, shadow)
}
