package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// dashboards are the Grafana dashboards whose queries must name metrics
// serve exports.
var dashboards = []string{"../../deploy/grafana/floodgate.json"}

// dashboardQueries returns every PromQL expression of a dashboard: the
// panels' targets (at any depth, rows' panels included) and the query
// variables' queries.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Templating struct {
			List []struct {
				Type  string
				Query any
			}
		}
	}
	var tree any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	_ = json.Unmarshal(b, &tree)
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if e, ok := c.(string); ok && k == "expr" {
					out = append(out, e)
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(tree)
	for _, v := range doc.Templating.List {
		switch q := v.Query.(type) {
		case string:
			if v.Type == "query" {
				out = append(out, q)
			}
		case map[string]any:
			if s, ok := q["query"].(string); ok && v.Type == "query" {
				out = append(out, s)
			}
		}
	}
	return out
}

// promqlWords are PromQL's keywords and aggregation modifiers: identifiers
// that are not metrics.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"offset": true, "bool": true, "and": true, "or": true, "unless": true, "atan2": true, "inf": true, "nan": true,
}

var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	labelValues    = regexp.MustCompile(`\blabel_values\s*\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,[^)]*\)`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// metricNames returns the metric names a PromQL expression (or a Grafana
// label_values query) reads: identifiers that are not inside strings,
// label matchers, ranges or grouping clauses, not followed by "(" (a
// function or an aggregation), not keywords, not Grafana's $variables.
func metricNames(expr string) []string {
	expr = promqlString.ReplaceAllString(expr, `""`)
	expr = labelValues.ReplaceAllString(expr, "$1")
	expr = promqlMatchers.ReplaceAllString(expr, "{}")
	expr = promqlRange.ReplaceAllString(expr, "[]")
	expr = promqlGrouping.ReplaceAllString(expr, "")
	var names []string
	for _, loc := range promqlIdent.FindAllStringIndex(expr, -1) {
		word := expr[loc[0]:loc[1]]
		rest := strings.TrimLeft(expr[loc[1]:], " \t\n")
		before := expr[:loc[0]]
		switch {
		case promqlWords[strings.ToLower(word)], strings.HasPrefix(rest, "("):
		case strings.HasSuffix(before, "$"), len(before) > 0 && (before[len(before)-1] >= '0' && before[len(before)-1] <= '9' || before[len(before)-1] == '.'):
			// a $variable, or the exponent or unit of a number (1e3, 5m)
		default:
			if !slices.Contains(names, word) {
				names = append(names, word)
			}
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`rate(a_total[5m])`, []string{"a_total"}},
		{`sum by (rule, outcome) (rate(a_total{instance=~"$instance", outcome="denied"}[$__rate_interval]))`, []string{"a_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_seconds_bucket{x="a{b}"}[5m])))`, []string{"h_seconds_bucket"}},
		{`a / on(rule) group_left b > bool 0.5`, []string{"a", "b"}},
		{`sum(x) without (le) or vector(0)`, []string{"x"}},
		{`label_values(up_total, instance)`, []string{"up_total"}},
		{`increase(c_total[1h] offset 5m) * 1e3`, []string{"c_total"}},
		{"g\n  unless\n  h{a='x y'}", []string{"g", "h"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// scrape returns the series names serve's /metrics exports: each family's
// name, and for a histogram its _bucket, _sum and _count.
func scrape(t *testing.T, base string, names map[string]bool) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	for name, f := range fams {
		names[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
}

// TestDashboardMetrics: every metric a dashboard query names is one serve
// exports on a live /metrics, after traffic that makes each series: the
// API's decisions and denials (with the over-limit cache and a lease on
// Redis), Envoy's RLS, and a second instance whose Redis is down (store
// errors, fail-open activations, the breaker's per-node series).
func TestDashboardMetrics(t *testing.T) {
	names := map[string]bool{}
	onRedis := os.Getenv("FLOODGATE_REDIS_ADDR") != "" || os.Getenv("FLOODGATE_REQUIRE_REDIS") != ""

	// The healthy instance: Redis when the harness is up, else memory.
	store := "store:\n  type: memory\n"
	if onRedis {
		store = fmt.Sprintf("store:\n  type: redis\n  addrs: [%q]\n  key_prefix: %q\n", redistest.StandaloneAddr(t), "fgdash-"+randomHex(6)+":")
	}
	cfg := store + `rules:
  - name: login
    algorithm: fixed_window
    limit: 1
    window: 1h
  - name: leased
    algorithm: fixed_window
    limit: 100000
    window: 1h
    lease: {}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := t.TempDir()
	writeRules(t, rules, "5")
	base, addr, logs, stop := startServeRLS(t, true, "--config", path, "--envoy-config", rules, "--grpc-listen", "127.0.0.1:0")
	for i, want := range []int{200, 429, 429} { // the second denial is the cache's, on Redis
		if code, body := post(t, base+"/v1/check", `{"rule":"login","key":"k"}`); code != want {
			t.Fatalf("login %d: %d %s, want %d", i+1, code, body, want)
		}
	}
	for range 3 {
		if code, body := post(t, base+"/v1/check", `{"rule":"leased","key":"k"}`); code != 200 {
			t.Fatalf("leased: %d %s", code, body)
		}
	}
	c, conn := rlsClient(t, addr)
	defer conn.Close()
	if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}}); err != nil {
		t.Fatal(err)
	}
	scrape(t, base, names)
	if err := stop(); err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}

	// The instance whose Redis is down: a port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	downCfg := fmt.Sprintf("store:\n  type: redis\n  addrs: [%q]\n  timeout: 100ms\nrules:\n  - name: open\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n    failure_mode: open\n", down)
	downPath := filepath.Join(dir, "down.yaml")
	if err := os.WriteFile(downPath, []byte(downCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, stop = startServe(t, "--config", downPath)
	if code, body := post(t, base+"/v1/check", `{"rule":"open","key":"k"}`); code != 200 {
		t.Fatalf("fail-open rule with Redis down: %d %s", code, body)
	}
	scrape(t, base, names)
	_ = stop()

	// Series only Redis makes: the memory store decides in-process, with
	// no over-limit cache and no leases, and has no nodes.
	redisOnly := map[string]bool{"floodgate_overlimit_cache_hits_total": true, "floodgate_leased_decisions_total": true,
		"floodgate_store_node_available": true, "floodgate_store_node_breaker_opens_total": true,
		"floodgate_store_node_in_flight": true, "floodgate_store_node_consecutive_failures": true}
	for _, d := range dashboards {
		queries := dashboardQueries(t, d)
		if len(queries) == 0 {
			t.Fatalf("%s: no queries", d)
		}
		for _, q := range queries {
			for _, name := range metricNames(q) {
				switch {
				case names[name]:
				case redisOnly[name] && !onRedis:
					t.Logf("%s: %s is exported on Redis only; the Redis harness is not up", d, name)
				default:
					t.Errorf("%s: query %q names %s, which serve does not export", d, q, name)
				}
			}
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
