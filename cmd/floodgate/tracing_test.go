package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// The traceparents' trace ids, one per request the tests send.
const (
	checkTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	authTrace  = "0af7651916cd43dd8448eb211c80319c"
	rlsTrace   = "11111111111111111111111111111111"
)

// tracedRequest sends a POST /v1/check for rule login, or a forward-auth
// sub-request, with a traceparent of trace id, and returns the status.
func tracedRequest(t *testing.T, method, url, trace string) int {
	t.Helper()
	body := ""
	if method == http.MethodPost {
		body = `{"rule":"login","key":"user-42"}`
	}
	return sendStatus(t, method, url, body, "Traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
}

// consoleSpan is what the console exporter writes of a span (one JSON
// object per line), the parts the test reads.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID string }
	Parent      struct{ SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

func (s *consoleSpan) attr(key string) any {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.Value
		}
	}
	return nil
}

// TestConsoleTraces: with OTEL_TRACES_EXPORTER=console the binary writes,
// to its standard output, the decision span of a /v1/check in the trace of
// the request's traceparent, naming the rule and the verdict; without the
// variable it writes no span.
func TestConsoleTraces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		spans bool
	}{
		{"console", []string{"OTEL_TRACES_EXPORTER=console"}, true},
		{"unset", nil, false},
		{"none", []string{"OTEL_TRACES_EXPORTER=none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary(t), "serve", "--listen", "127.0.0.1:0")
			cmd.Env = append(cleanEnv(), tc.env...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr := &syncbuf.Buffer{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			lines := make(chan string, 256)
			go func() {
				sc := bufio.NewScanner(stdout)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			base := ""
			for line := range lines {
				if m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(line); m != nil {
					base = m[1]
				}
				if strings.HasPrefix(line, "try:") {
					break
				}
			}
			if base == "" {
				t.Fatalf("no banner; stderr:\n%s", stderr)
			}
			for i, want := range []int{200, 200, 200, 200, 200, 429} {
				if got := tracedRequest(t, http.MethodPost, base+"/v1/check", checkTrace); got != want {
					t.Fatalf("request %d: %d, want %d", i+1, got, want)
				}
			}
			// SIGTERM: serve shuts down and flushes the spans it holds.
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			var spans []consoleSpan
			for line := range lines {
				if !strings.HasPrefix(line, "{") {
					continue
				}
				var s consoleSpan
				if err := json.Unmarshal([]byte(line), &s); err != nil {
					t.Fatalf("console line %q: %v", line, err)
				}
				spans = append(spans, s)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("serve: %v; stderr:\n%s", err, stderr)
			}
			if !tc.spans {
				if len(spans) > 0 {
					t.Fatalf("%d spans written, want none", len(spans))
				}
				return
			}
			verdicts := map[any]int{}
			stores := 0
			for _, s := range spans {
				if s.SpanContext.TraceID != checkTrace {
					t.Errorf("span %s in trace %s, want the traceparent's %s", s.Name, s.SpanContext.TraceID, checkTrace)
				}
				switch s.Name {
				case "floodgate.decide":
					if rules, _ := s.attr("ratelimit.limit_name").([]any); len(rules) != 1 || rules[0] != "login" {
						t.Errorf("ratelimit.limit_name = %v, want [login]", s.attr("ratelimit.limit_name"))
					}
					if got := s.attr("ratelimit.deciding_rule"); got != "login" {
						t.Errorf("ratelimit.deciding_rule = %v, want login", got)
					}
					if s.Parent.SpanID != "00f067aa0ba902b7" {
						t.Errorf("decision's parent %s, want the traceparent's span", s.Parent.SpanID)
					}
					verdicts[s.attr("ratelimit.result")]++
				case "floodgate.store.allow":
					stores++
				}
			}
			if verdicts["admitted"] != 5 || verdicts["denied"] != 1 {
				t.Errorf("decision spans by verdict %v, want 5 admitted and 1 denied", verdicts)
			}
			if stores < 5 {
				t.Errorf("%d store call spans, want one per decision the store made (at least 5)", stores)
			}
		})
	}
}

// otlpReceiver collects the spans OTLP exporters send it, over gRPC or
// HTTP (protobuf), on loopback.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	names map[string]bool // service.name of the resources
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				r.names[a.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, err := io.ReadAll(req.Body)
	var in coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &in)
	}
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	out, _ := r.Export(req.Context(), &in)
	b, _ = proto.Marshal(out)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// byTrace returns the spans received by name, for one trace id.
func (r *otlpReceiver) byTrace(trace string) map[string][]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string][]*tracepb.Span{}
	for _, s := range r.spans {
		if hex.EncodeToString(s.GetTraceId()) == trace {
			m[s.GetName()] = append(m[s.GetName()], s)
		}
	}
	return m
}

// TestOTLPTraces: serve exports its spans over OTLP, gRPC and HTTP, to
// the endpoint of OTEL_EXPORTER_OTLP_ENDPOINT, under OTEL_SERVICE_NAME;
// the API, forward auth and Envoy's RLS continue the requests'
// traceparents.
func TestOTLPTraces(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			recv := &otlpReceiver{names: map[string]bool{}}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			switch protocol {
			case "grpc":
				g := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(g, recv)
				go func() { _ = g.Serve(ln) }()
				defer g.Stop()
			default:
				srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: recv}}
				srv.Start()
				defer srv.Close()
			}
			t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
			t.Setenv("OTEL_SERVICE_NAME", "floodgate-test")
			t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
			dir := t.TempDir()
			writeRules(t, dir, "5")
			base, addr, logs, stop := startServeRLS(t, true, "--envoy-config", dir, "--grpc-listen", "127.0.0.1:0")
			if got := tracedRequest(t, http.MethodPost, base+"/v1/check", checkTrace); got != 200 {
				t.Fatalf("check: %d", got)
			}
			if got := tracedRequest(t, http.MethodGet, base+"/v1/forward-auth?rule=login", authTrace); got != 200 {
				t.Fatalf("forward auth: %d", got)
			}
			c, conn := rlsClient(t, addr)
			defer conn.Close()
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+rlsTrace+"-00f067aa0ba902b7-01")
			if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}}); err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			if err := stop(); err != nil { // flushes the spans
				t.Fatalf("serve: %v\n%s", err, logs)
			}
			for _, trace := range []string{checkTrace, authTrace, rlsTrace} {
				spans := recv.byTrace(trace)
				d := spans["floodgate.decide"]
				if len(d) != 1 || len(spans["floodgate.store.allow"]) != 1 {
					t.Fatalf("trace %s: spans %v, want one decision and one store call; log:\n%s", trace, spans, logs)
				}
				if got := hex.EncodeToString(d[0].GetParentSpanId()); got != "00f067aa0ba902b7" {
					t.Errorf("decision's parent %s, want the traceparent's span", got)
				}
				if got := hex.EncodeToString(spans["floodgate.store.allow"][0].GetParentSpanId()); got != hex.EncodeToString(d[0].GetSpanId()) {
					t.Errorf("store call's parent %s, want the decision", got)
				}
			}
			if !recv.names["floodgate-test"] {
				t.Errorf("service names %v, want OTEL_SERVICE_NAME's", recv.names)
			}
		})
	}
}

// cleanEnv is the test's environment without OpenTelemetry's variables,
// so the developer's own cannot change what a test expects.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestExemplars: with tracing on, serve's /metrics in OpenMetrics (as
// Prometheus negotiates it) carries the decision's trace id as the
// exemplar of the decision and store latency histograms; with tracing
// off, none.
func TestExemplars(t *testing.T) {
	for _, tc := range []struct {
		name   string
		traced bool
	}{{"traced", true}, {"off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			recv := &otlpReceiver{names: map[string]bool{}}
			srv := httptest.NewServer(recv)
			defer srv.Close()
			if tc.traced {
				t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
			} else {
				t.Setenv("OTEL_TRACES_EXPORTER", "")
			}
			base, _, _ := startServe(t)
			if got := tracedRequest(t, http.MethodPost, base+"/v1/check", checkTrace); got != 200 {
				t.Fatalf("check: %d", got)
			}
			req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
				t.Fatalf("Content-Type %q, want OpenMetrics", ct)
			}
			for _, series := range []string{"floodgate_decision_duration_seconds_bucket{", `floodgate_store_latency_seconds_bucket{op="allow",`} {
				found := false
				for _, line := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(line, series) && strings.Contains(line, `# {trace_id="`+checkTrace+`"}`) {
						found = true
					}
				}
				if found != tc.traced {
					t.Errorf("%s with the request's trace id as exemplar: %v, want %v", series, found, tc.traced)
				}
			}
		})
	}
}

// TestNewTracing: what each OTEL_TRACES_EXPORTER gives, and the errors of
// values no exporter takes, naming the variable.
func TestNewTracing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		traced  bool
		wantErr string
	}{
		{name: "unset"},
		{name: "empty", env: map[string]string{"OTEL_TRACES_EXPORTER": ""}},
		{name: "none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{name: "console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, traced: true},
		{name: "otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, traced: true},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin2"}, wantErr: "OTEL_TRACES_EXPORTER=zipkin2"},
		{name: "unknown protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, wantErr: "OTEL_TRACES_EXPORTER=otlp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
				t.Setenv(k, tc.env[k])
			}
			tp, shutdown, err := newTracing(context.Background(), os.Getenv)
			defer func() { _ = shutdown(context.Background()) }()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case (tp != nil) != tc.traced:
				t.Fatalf("provider %v, want one: %v", tp, tc.traced)
			}
		})
	}
}

// TestTracingSampler: the provider samples as OTEL_TRACES_SAMPLER(_ARG) say.
func TestTracingSampler(t *testing.T) {
	for _, tc := range []struct {
		sampler, arg string
		recorded     bool
	}{
		{"", "", true}, // parentbased_always_on
		{"always_off", "", false},
		{"traceidratio", "0", false},
		{"traceidratio", "1", true},
	} {
		t.Run(tc.sampler+"="+tc.arg, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_EXPORTER", "console")
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			tp, shutdown, err := newTracing(context.Background(), os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = shutdown(context.Background()) }()
			// Never ended, so the console exporter writes nothing.
			_, span := tp.Tracer("test").Start(context.Background(), "s")
			if got := span.IsRecording(); got != tc.recorded {
				t.Errorf("recorded %v, want %v", got, tc.recorded)
			}
		})
	}
}
