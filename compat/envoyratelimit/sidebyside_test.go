package envoyratelimit

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// step is one ShouldRateLimit call of a scenario: a domain and its
// descriptors, each a list of key=value entries, as Envoy builds them from
// the routes of the peer's examples/envoy/proxy.yaml.
type step struct {
	domain string
	descs  [][]string // "key=value"
	hits   []int      // per descriptor hits_addend; -1 or absent: none
}

func req(domain string, descs ...[]string) step { return step{domain: domain, descs: descs} }

func d(entries ...string) []string { return entries }

// times repeats s n times.
func times(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func seq(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch v := p.(type) {
		case step:
			out = append(out, v)
		case []step:
			out = append(out, v...)
		}
	}
	return out
}

// scenario is a request sequence from the peer's own integration tests,
// with the shortest unit among its rules (it runs inside one window of it).
type scenario struct {
	name  string
	unit  time.Duration
	steps []step
}

// scenarios are the peer's integration-test sequences
// (test/integration/integration_test.go and integration-test/scripts/*.sh)
// over its integration and example rule files.
func scenarios() []scenario {
	// /twoheader and /fourheader and /fiveheader of examples/envoy/proxy.yaml.
	four := func(foo, bar, src, dst string) step {
		return req("rl", d("foo="+foo, "bar="+bar), d("source_cluster="+src, "destination_cluster="+dst))
	}
	five := func(foo, bar, src, dst, cat string) step {
		return req("rl", d("foo="+foo, "bar="+bar), d("source_cluster="+src, "destination_cluster="+dst), d("category="+cat))
	}
	two := func(foo, k, v string) step { return req("rl", d("foo="+foo, k+"="+v)) }
	hits := func(s step, h ...int) step { s.hits = h; return s }
	return []scenario{
		{"basic: unknown domain and a per-second rule", time.Second, seq(
			req("foo", d("hello=world")),
			req("basic", d("key1=foo")),
		)},
		{"basic: 25 requests against 20 per minute", time.Minute, seq(
			times(25, req("another", d("key2=run-1"))),
		)},
		{"basic: two keys in one domain, 15 requests", time.Minute, seq(
			times(15, req("another", d("key2=run-2"), d("key3=run-2"))),
		)},
		{"basic: one per minute", time.Minute, seq(
			times(3, req("basic", d("one_per_minute=a"))),
		)},
		{"share_threshold: every value under files/* shares one counter", time.Hour, seq(
			req("share-threshold-test", d("files=files/a.pdf")),
			req("share-threshold-test", d("files=files/b.csv")),
			times(9, req("share-threshold-test", d("files=files/c/d"))),
			req("share-threshold-test", d("files=files/e")),
			times(11, req("share-threshold-test", d("files_no_share=files_no_share/a"))),
			req("share-threshold-test", d("files_no_share=files_no_share/b")),
		)},
		{"replaces.sh: all its steps", time.Minute, seq(
			two("bkthomps", "bar", "banned"),
			four("bkthomps", "banned", "proxy", "mock"),
			times(3, four("bkthomps", "banned", "proxy", "override")),
			times(3, four("my_foo", "bkthomps", "proxy", "bkthomps")),
			times(2, four("my_foo", "bkthomps", "proxy", "not_bkthomps")),
			four("my_foo", "bkthomps", "proxy", "bkthomps"),
			times(5, five("my_foo", "bkthomps", "proxy", "fake", "account")),
			times(2, two("foo_2", "bar", "bkthomps")),
			times(3, four("foo_3", "bar_3", "proxy", "fake")),
			five("my_foo", "bkthomps", "proxy", "fake", "account"),
		)},
		{"trigger-ratelimit.sh", time.Minute, seq(times(5, two("pelle", "baz", "not-so-shady")))},
		{"trigger-shadow-mode-key.sh", time.Minute, seq(times(6, two("pelle", "baz", "shady")))},
		{"value-included-in-stats-key-when-unspecified.sh", time.Minute, seq(times(3, req("rl", d("unspec=unspecified_value"))))},
		{"simple-get.sh and nested rules", time.Second, seq(
			two("test", "baz", "shady"),
			two("test", "baz", "anything"), // baz alone: 1 per second
			two("test", "baz", "anything"),
			req("rl", d("foo=x")),
			req("rl", d("foo=x", "bay=y")), // unlimited
			req("rl", d("qux=q")),          // unlimited
		)},
		{"examples: mongo_cps", time.Second, seq(
			times(3, req("mongo_cps", d("database=users"))),
			req("mongo_cps", d("database=default")),
			req("mongo_cps", d("database=other")),
		)},
		{"hits_addend: counts, check only (0), above the quota", time.Minute, seq(
			hits(req("another", d("key2=hits")), 5),
			hits(req("another", d("key2=hits")), 0),
			hits(req("another", d("key2=hits")), 0),
			hits(req("another", d("key2=hits")), 15),
			hits(req("another", d("key2=hits")), 0),
			hits(req("another", d("key2=hits")), 1),
			hits(req("another", d("key2=hits")), 0),
			hits(req("another", d("key2=hits-2")), 30),
			hits(req("rl", d("foo=f", "bar=banned")), 0),
		)},
	}
}

// The request a step sends.
func (s step) request() *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: s.domain}
	for i, es := range s.descs {
		desc := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range es {
			k, v, _ := strings.Cut(e, "=")
			desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		if i < len(s.hits) && s.hits[i] >= 0 {
			desc.HitsAddend = wrapperspb.UInt64(uint64(s.hits[i]))
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return r
}

// TestSideBySide sends the peer's integration-test sequences to the real
// envoyproxy/ratelimit and to floodgate, both processes started with the
// same environment of a peer deployment (floodgate as its drop-in,
// serve --envoy-env), on the peer's rule files, each on a Redis of its own,
// and diffs every answer field by field. floodgate's answers must equal
// the peer's, but where a listed Difference applies; there they must equal
// what floodgate's documented semantics give (a model of fixed windows
// that count admitted requests only), which the test computes beside.
func TestSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs envoyproxy/ratelimit")
	}
	src, version, err := PeerSource()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("envoyproxy/ratelimit %s", version)
	bins, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []struct {
		name   string
		env    []string
		global string
		redis  redisLayout
		spread bool // the rule files spread over the places RUNTIME_WATCH_ROOT=true reads
	}{
		{"defaults", nil, "", oneRedis, false},
		{"LIMIT_RESPONSE_HEADERS_ENABLED and RESPONSE_DYNAMIC_METADATA",
			[]string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-Left", "RESPONSE_DYNAMIC_METADATA=true"}, "", oneRedis, false},
		{"SHADOW_MODE", []string{"SHADOW_MODE=true"}, "shadow", oneRedis, false},
		{"QUOTA_MODE", []string{"QUOTA_MODE=true", "RESPONSE_DYNAMIC_METADATA=true"}, "quota", oneRedis, false},
		{"REDIS_PERSECOND, the main Redis over a unix socket", nil, "", perSecondRedis, false},
		{"RUNTIME_WATCH_ROOT and dot-files as the peer's defaults, rules spread over the folders it reads",
			[]string{"RUNTIME_WATCH_ROOT=true", "RUNTIME_IGNOREDOTFILES=false"}, "", oneRedis, true},
	} {
		t.Run(set.name, func(t *testing.T) {
			// Each set has its own pair, Redis servers, ports, folders and
			// statsd sinks, and spends most of its time waiting for windows
			// and flushes: the sets overlap (make test runs this package
			// with -parallel 6).
			t.Parallel()
			sideBySide(t, src, bins, set.env, set.global, set.redis, set.spread)
		})
	}
}

// spreadRules moves the rule files CopyRules wrote into cfg (a
// root/ratelimit/config folder) to each place envoyproxy/ratelimit reads
// with RUNTIME_WATCH_ROOT=true, a file's path under root/ratelimit (/ as
// dots) starting with "config.": root/ratelimit/config.yaml,
// config.<name>.yaml, config.d/ and config/ itself; it adds a dot-file there
// (read, as RUNTIME_IGNOREDOTFILES=false reads it) and a file with YAML
// anchors and merge keys, and two files the peer
// does not read, whose domains would limit if they were: configs.yaml and
// .config.yaml. It returns the steps that tell them apart.
func spreadRules(t *testing.T, cfg string) []step {
	t.Helper()
	sub := filepath.Dir(cfg)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(sub, "config.d"), 0o755))
	for from, to := range map[string]string{
		"ratelimit-basic.yaml":           "config.yaml",
		"ratelimit-another.yaml":         "config.another.yaml",
		"ratelimit-share_threshold.yaml": "config.d/share_threshold.yaml",
	} {
		must(os.Rename(filepath.Join(cfg, from), filepath.Join(sub, to)))
	}
	rule := func(domain string, n int) []byte {
		return []byte("domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + strconv.Itoa(n) + "}\n")
	}
	must(os.WriteFile(filepath.Join(cfg, ".dotfile.yaml"), rule("dotfile", 2), 0o644))
	// YAML anchors, an alias and merge keys, which the peer's yaml.v2 reads.
	must(os.WriteFile(filepath.Join(cfg, "anchors.yaml"), []byte(`domain: anchors
descriptors:
  - &two
    key: two
    rate_limit: &per_minute {unit: minute, requests_per_unit: 2}
  - key: alias
    rate_limit: *per_minute
  - <<: *two
    key: three
    rate_limit:
      <<: *per_minute
      requests_per_unit: 3
`), 0o644))
	must(os.WriteFile(filepath.Join(sub, "configs.yaml"), rule("not_read", 0), 0o644))
	must(os.WriteFile(filepath.Join(sub, ".config.yaml"), rule("not_read_dot", 0), 0o644))
	return seq(times(3, req("dotfile", d("k=a"))), req("not_read", d("k=a")), req("not_read_dot", d("k=a")),
		times(3, req("anchors", d("two=a"))), times(3, req("anchors", d("alias=a"))), times(4, req("anchors", d("three=a"))))
}

// redisLayout is how a pair's services reach Redis.
type redisLayout int

const (
	oneRedis       redisLayout = iota // one Redis each, over TCP (Env's)
	perSecondRedis                    // the main Redis over a unix socket, REDIS_PERSECOND's over TCP
)

// redisEnv spawns the Redis servers of one service under layout and
// returns the environment that points at them, with a check, to run after
// the scenarios, that both Redis servers were written to.
func redisEnv(t *testing.T, layout redisLayout) (env []string, check func(t *testing.T, who string)) {
	if layout == oneRedis {
		r := redistest.Spawn(t)
		return []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + r.Addr}, func(*testing.T, string) {}
	}
	dir, err := os.MkdirTemp("", "rls") // short: a socket's path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "redis.sock")
	main, perSecond := redistest.Spawn(t, "--unixsocket", sock, "--unixsocketperm", "700"), redistest.Spawn(t)
	env = []string{"REDIS_SOCKET_TYPE=unix", "REDIS_URL=" + sock,
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL=" + perSecond.Addr}
	return env, func(t *testing.T, who string) {
		for _, r := range []struct {
			name string
			srv  *redistest.SpawnedServer
		}{{"main", main}, {"per-second", perSecond}} {
			if n, err := keysWritten(t, r.srv); err != nil || n == 0 {
				t.Errorf("%s: its %s Redis was written %d keys (%v) by the scenarios, want some", who, r.name, n, err)
			}
		}
	}
}

// keysWritten is how many keys srv holds or has expired: a per-second
// limit's keys live about a second, and a loaded machine can take longer
// than that between the last scenario and the check.
func keysWritten(t *testing.T, srv *redistest.SpawnedServer) (int64, error) {
	held, err := srv.Do(t, "DBSIZE").AsInt64()
	if err != nil {
		return 0, err
	}
	info, err := srv.Do(t, "INFO", "stats").ToString()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "expired_keys:"); ok {
			expired, err := strconv.ParseInt(v, 10, 64)
			return held + expired, err
		}
	}
	return 0, fmt.Errorf("INFO stats has no expired_keys")
}

// pair is the two services side by side, each with its rule folder.
type pair struct {
	peer, fg       *service
	peerCfg, fgCfg string
	// statsKeys are the statistics keys (ratelimit.service.rate_limit.<key>)
	// whose counts a Difference lets differ, with their names; shadowKeys
	// those of rules in shadow_mode.
	statsKeys  map[string]map[string]bool
	shadowKeys map[string]bool
}

// sideBySide runs every scenario against a new pair started with the
// peer's environment plus env, then a reload of the rule folder.
func sideBySide(t *testing.T, src string, bins [2]string, env []string, global string, layout redisLayout, spread bool) {
	peerRoot, fgRoot := t.TempDir(), t.TempDir()
	pc, err := CopyRules(src, peerRoot, RuleFiles)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := CopyRules(src, fgRoot, RuleFiles)
	if err != nil {
		t.Fatal(err)
	}
	scs := scenarios()
	rules, err := envoy.Load(fc, envoy.LoadOptions{}) // RUNTIME_IGNOREDOTFILES=true
	if spread {
		spreadRules(t, pc)
		scs = append(scs, scenario{"the files RUNTIME_WATCH_ROOT reads", time.Minute, spreadRules(t, fc)})
		rules, err = envoy.Load(filepath.Dir(fc), envoy.LoadOptions{Prefix: "config", DotFiles: true})
		if got, want := strings.Join(rules.Domains(), ","), "anchors,another,basic,dotfile,mongo_cps,rl,share-threshold-test"; err == nil && got != want {
			t.Fatalf("floodgate's loader read the domains %s, want %s", got, want)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	peerRedis, peerCheck := redisEnv(t, layout)
	fgRedis, fgCheck := redisEnv(t, layout)
	pp, err := FreePorts()
	if err != nil {
		t.Fatal(err)
	}
	fp, err := FreePorts()
	if err != nil {
		t.Fatal(err)
	}
	// Both push their statistics to a statsd sink of the test.
	peerStats, fgStats := newStatsdSink(t), newStatsdSink(t)
	ps := pair{
		peer:    start(t, "envoyproxy/ratelimit", bins[0], slices.Concat(Env(peerRoot, "", pp), peerRedis, env, peerStats.env()), pp),
		fg:      start(t, "floodgate", bins[1], slices.Concat(Env(fgRoot, "", fp), fgRedis, env, fgStats.env()), fp, "serve", "--envoy-env"),
		peerCfg: pc, fgCfg: fc, statsKeys: map[string]map[string]bool{}, shadowKeys: map[string]bool{},
	}
	diffs := map[string]int{}
	for _, sc := range scs {
		t.Run(sc.name, func(t *testing.T) {
			awaitWindow(sc.unit, len(sc.steps))
			m := newModel(rules, global)
			for i, s := range sc.steps {
				ps.step(t, fmt.Sprintf("step %d %s %v", i, s.domain, s.descs), m, s, diffs)
			}
		})
	}
	// value-included-in-stats-key-when-unspecified.sh: the detailed
	// metric's over_limit, under the peer's Prometheus name.
	metrics := get(t, "http://"+ps.fg.http+"/metrics")
	if line := `ratelimit_service_rate_limit_over_limit{domain="rl",key1="unspec_unspecified_value",key2=""} 1`; !strings.Contains(metrics, line) {
		t.Errorf("floodgate's /metrics lacks %s, as the peer's script checks", line)
	}
	peerCheck(t, "envoyproxy/ratelimit")
	fgCheck(t, "floodgate")
	// The statistics both pushed over statsd, before the reload's polling
	// calls.
	ps.diffStats(t, peerStats, fgStats, diffs)
	// Health as the peer's probes ask for it.
	for _, svc := range []*service{ps.peer, ps.fg} {
		if body := get(t, "http://"+svc.http+"/healthcheck"); body != "OK" {
			t.Errorf("GET %s/healthcheck = %q, want OK", svc.http, body)
		}
	}
	if len(env) == 0 && layout == oneRedis { // after diffStats: the peer counts nothing for these calls
		t.Run("invalid UTF-8 in a value", func(t *testing.T) { ps.invalidUTF8(t) })
	}
	if global == "" && !spread { // with RUNTIME_WATCH_ROOT=true the peer reloads only when RUNTIME_ROOT is swapped
		t.Run("reload: a new file in the watched folder", func(t *testing.T) { ps.reload(t, src, rules) })
	}
	for _, df := range append(slices.Clone(Differences), UnsentStats...) {
		if n := diffs[df.Name]; n > 0 {
			t.Logf("deliberate difference %s: %d fields", df.Name, n)
		}
	}
}

// step sends one step to both and diffs the answers.
func (ps *pair) step(t *testing.T, what string, m *model, s step, diffs map[string]int) {
	t.Helper()
	r := s.request()
	pr, perr := ps.peer.client.ShouldRateLimit(context.Background(), r)
	fr, ferr := ps.fg.client.ShouldRateLimit(context.Background(), r)
	if perr != nil || ferr != nil {
		t.Fatalf("%s: peer error %v, floodgate error %v", what, perr, ferr)
	}
	rs, _, hits, peek := m.match(s)
	want, overall := m.apply(s)
	compare(t, what, pr, fr, want, overall, diffs)
	ps.noteStats(s, rs, hits, peek, want)
}

// reload is the peer's testConfigReload: its reload.yaml written into both
// watched folders is in force in both within a generous bound, and then
// answers alike.
func (ps *pair) reload(t *testing.T, src string, rules *envoy.Rules) {
	data, err := os.ReadFile(filepath.Join(src, "test/integration/runtime/current/ratelimit/reload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{ps.peerCfg, ps.fgCfg} {
		if err := os.WriteFile(filepath.Join(dir, "reload.yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fresh, err := envoy.Load(ps.fgCfg, envoy.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := req("reload", d("key1=foo")).request()
	for _, svc := range []*service{ps.peer, ps.fg} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := svc.client.ShouldRateLimit(context.Background(), r)
			if err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never loaded reload.yaml: %v %v", svc.http, resp, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	awaitWindow(time.Second, 3)
	m := newModel(fresh, "")
	diffs := map[string]int{}
	for i, s := range []step{req("reload", d("key1=bar")), req("reload", d("block=x")), req("reload", d("one_per_minute=y"))} {
		ps.step(t, fmt.Sprintf("reload step %d %v", i, s.descs), m, s, diffs)
	}
}

// get returns the body of a GET of url that answers 200.
func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	return string(b)
}

// awaitWindow waits until a sequence of n steps can run inside one window
// of unit: for a second, the start of the next second; else until at
// least 15 seconds remain in it.
func awaitWindow(unit time.Duration, n int) {
	now := time.Now()
	left := unit - time.Duration(now.UnixNano()%int64(unit))
	need := 15 * time.Second
	if unit == time.Second {
		need = time.Second
	}
	if left < need || unit == time.Second {
		time.Sleep(left + 5*time.Millisecond)
	}
}

// expected is the answer floodgate's semantics give for one descriptor,
// and whether a Difference makes it differ from the peer's.
type expected struct {
	code      rlsv3.RateLimitResponse_Code
	limited   bool // a rule with a limit applies (not unlimited, not replaced, not none)
	unlimited bool
	remaining uint32
	reset     bool   // duration_until_reset is set
	differs   string // the Difference that applies, or ""
	shadow    bool   // shadow_mode, SHADOW_MODE or QUOTA_MODE: never in a header
}

// model follows floodgate's fixed windows (the default algorithm) and the
// peer's counters side by side, within one window: floodgate counts the
// hits of admitted requests only, the peer every hit.
type model struct {
	global string // "shadow" (SHADOW_MODE), "quota" (QUOTA_MODE) or ""
	rules  *envoy.Rules
	fg     map[string]uint64
	peer   map[string]uint64
	rounds int
}

func newModel(rules *envoy.Rules, global string) *model {
	return &model{global: global, rules: rules, fg: map[string]uint64{}, peer: map[string]uint64{}}
}

// counter names a descriptor's counter: the domain and entries, with a
// share_threshold entry's value replaced by its pattern.
func counter(domain string, r *envoy.Rule, entries []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		if p := r.Shared(i); p != "" {
			k, _, _ := strings.Cut(e, "=")
			e = k + "=" + p
		}
		b.WriteString("|" + e)
	}
	return b.String()
}

// apply decides a step in the model and returns floodgate's expected
// statuses and overall code.
func (m *model) apply(s step) ([]expected, rlsv3.RateLimitResponse_Code) {
	if m.global != "" {
		return m.applyGlobal(s)
	}
	n := len(s.descs)
	rs := make([]*envoy.Rule, n)
	var replaced []string
	for i, es := range s.descs {
		entries := make([]envoy.Entry, len(es))
		for j, e := range es {
			k, v, _ := strings.Cut(e, "=")
			entries[j] = envoy.Entry{Key: k, Value: v}
		}
		rs[i] = m.rules.Match(s.domain, entries)
		if rs[i] != nil {
			replaced = append(replaced, rs[i].Replaces...)
		}
	}
	out := make([]expected, n)
	for i := range out {
		out[i].code = rlsv3.RateLimitResponse_OK
	}
	keys := make([]string, n)
	hits := make([]uint64, n)
	peek := make([]bool, n)
	admitted, shortcut := true, false
	for i, r := range rs {
		if r != nil && r.Name != "" && contains(replaced, r.Name) {
			rs[i] = nil
		}
		r = rs[i]
		hits[i] = 1
		if i < len(s.hits) && s.hits[i] >= 0 {
			hits[i], peek[i] = uint64(s.hits[i]), s.hits[i] == 0
		}
		switch {
		case r == nil:
			continue
		case r.Unlimited:
			out[i] = expected{code: rlsv3.RateLimitResponse_OK, unlimited: true, remaining: math.MaxUint32}
			continue
		}
		keys[i] = counter(s.domain, r, s.descs[i])
		out[i].limited, out[i].shadow = true, r.ShadowMode
		q := uint64(r.RequestsPerUnit)
		fits := m.fg[keys[i]]+hits[i] <= q
		if !fits && !r.ShadowMode {
			admitted = false
		}
		if !r.ShadowMode && !peek[i] && (q == 0 || hits[i] > q) {
			// Blocked, or a cost that can never fit: decided without
			// the store, and the others are not asked.
			shortcut = true
		}
	}
	diverged := false
	for i, r := range rs {
		if !out[i].limited {
			continue
		}
		k, q := keys[i], uint64(r.RequestsPerUnit)
		if m.fg[k] != m.peer[k] {
			diverged = true
		}
		fits := m.fg[k]+hits[i] <= q
		e := &out[i]
		e.reset = true
		switch {
		case !fits && !r.ShadowMode && hits[i] > q:
			e.code = rlsv3.RateLimitResponse_OVER_LIMIT // never fits: nothing asked
		case !fits && !r.ShadowMode:
			e.code = rlsv3.RateLimitResponse_OVER_LIMIT
			e.remaining = uint32(q - min(q, m.fg[k]))
		case shortcut && !(peek[i] && q == 0):
			e.reset = false // not asked: the request was denied first
		case peek[i] && q == 0:
		case !admitted && r.ShadowMode:
			e.reset = false // not asked: the request was denied first
		case !admitted:
			e.remaining = uint32(q - m.fg[k])
		case fits:
			e.remaining = uint32(q - m.fg[k] - hits[i])
		default: // shadow, over
			e.remaining = uint32(q - min(q, m.fg[k]))
		}
	}
	for i, r := range rs {
		if !out[i].limited {
			continue
		}
		k := keys[i]
		if admitted && m.fg[k]+hits[i] <= uint64(r.RequestsPerUnit) {
			m.fg[k] += hits[i]
		}
		m.peer[k] += hits[i]
	}
	for i := range out {
		switch {
		case !out[i].limited:
		case diverged || !admitted && anyHits(hits):
			out[i].differs = "denied-consumes-nothing"
		}
	}
	overall := rlsv3.RateLimitResponse_OK
	for _, e := range out {
		if e.code == rlsv3.RateLimitResponse_OVER_LIMIT {
			overall = e.code
		}
	}
	return out, overall
}

// match returns the rules of a step's descriptors, without the replaced
// ones, with each one's counter, hits and whether it only checks.
func (m *model) match(s step) (rs []*envoy.Rule, keys []string, hits []uint64, peek []bool) {
	n := len(s.descs)
	rs, keys, hits, peek = make([]*envoy.Rule, n), make([]string, n), make([]uint64, n), make([]bool, n)
	var replaced []string
	for i, es := range s.descs {
		entries := make([]envoy.Entry, len(es))
		for j, e := range es {
			k, v, _ := strings.Cut(e, "=")
			entries[j] = envoy.Entry{Key: k, Value: v}
		}
		if rs[i] = m.rules.Match(s.domain, entries); rs[i] != nil {
			replaced = append(replaced, rs[i].Replaces...)
		}
	}
	for i, r := range rs {
		if r != nil && r.Name != "" && contains(replaced, r.Name) {
			rs[i] = nil
		}
		hits[i] = 1
		if i < len(s.hits) && s.hits[i] >= 0 {
			hits[i], peek[i] = uint64(s.hits[i]), s.hits[i] == 0
		}
		if rs[i] != nil && !rs[i].Unlimited {
			keys[i] = counter(s.domain, rs[i], s.descs[i])
		}
	}
	return rs, keys, hits, peek
}

// applyGlobal is apply under SHADOW_MODE or QUOTA_MODE: every rule is a
// shadow check to floodgate's engine, each decided on its own; over the
// limit a status is OVER_LIMIT (shadow) or OK without a reset (quota), and
// the request is always OK.
func (m *model) applyGlobal(s step) ([]expected, rlsv3.RateLimitResponse_Code) {
	rs, keys, hits, peek := m.match(s)
	out := make([]expected, len(rs))
	for i, r := range rs {
		e := &out[i]
		e.code = rlsv3.RateLimitResponse_OK
		switch {
		case r == nil:
			continue
		case r.Unlimited:
			e.unlimited, e.remaining = true, math.MaxUint32
			continue
		}
		k, q, h := keys[i], uint64(r.RequestsPerUnit), hits[i]
		e.limited, e.reset, e.shadow = true, true, true
		if m.fg[k] != m.peer[k] {
			e.differs = "denied-consumes-nothing"
		}
		fits := m.fg[k]+h <= q || peek[i]
		switch {
		case fits:
			e.remaining = uint32(q - min(q, m.fg[k]+h))
			m.fg[k] += h
		case r.ShadowMode: // the rule's own shadow mode: OK
			e.remaining = uint32(q - min(q, m.fg[k]))
		default:
			if h <= q {
				e.remaining = uint32(q - min(q, m.fg[k]))
			}
			e.differs = "denied-consumes-nothing"
			if m.global == "quota" {
				e.reset = false
			} else {
				e.code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		m.peer[k] += h
	}
	return out, rlsv3.RateLimitResponse_OK
}

func anyHits(h []uint64) bool {
	for _, v := range h {
		if v > 0 {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// resetSlack is how far floodgate's duration_until_reset (exact, from Redis
// TIME) may be from the peer's (whole seconds, from its own clock).
const resetSlack = 1500 * time.Millisecond

// compare diffs the two answers field by field against the model.
func compare(t *testing.T, what string, peer, fg *rlsv3.RateLimitResponse, want []expected, overall rlsv3.RateLimitResponse_Code, diffs map[string]int) {
	t.Helper()
	if len(peer.GetStatuses()) != len(want) || len(fg.GetStatuses()) != len(want) {
		t.Fatalf("%s: %d statuses from the peer, %d from floodgate, want %d", what, len(peer.GetStatuses()), len(fg.GetStatuses()), len(want))
	}
	differs := false
	for i, w := range want {
		ps, fs := peer.Statuses[i], fg.Statuses[i]
		where := fmt.Sprintf("%s: statuses[%d]", what, i)
		// Against the model: always.
		if fs.GetCode() != w.code {
			t.Errorf("%s.code: floodgate %s, want %s", where, fs.GetCode(), w.code)
		}
		if fs.GetLimitRemaining() != w.remaining {
			t.Errorf("%s.limit_remaining: floodgate %d, want %d", where, fs.GetLimitRemaining(), w.remaining)
		}
		if (fs.GetDurationUntilReset() != nil) != w.reset {
			t.Errorf("%s.duration_until_reset: floodgate %v, want set=%v", where, fs.GetDurationUntilReset(), w.reset)
		}
		// current_limit: always the peer's.
		if a, b := describe(ps.GetCurrentLimit()), describe(fs.GetCurrentLimit()); a != b {
			t.Errorf("%s.current_limit: peer %q, floodgate %q", where, a, b)
		}
		if w.differs != "" {
			if ps.GetCode() != fs.GetCode() || ps.GetLimitRemaining() != fs.GetLimitRemaining() {
				diffs[w.differs]++
				differs = true
			}
			if w.code == rlsv3.RateLimitResponse_OVER_LIMIT && ps.GetCode() != w.code && ps.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("%s.code: floodgate %s, peer %s: floodgate's counters never run ahead of the peer's", where, fs.GetCode(), ps.GetCode())
			}
			continue
		}
		// Against the peer: every field.
		if ps.GetCode() != fs.GetCode() {
			t.Errorf("%s.code: peer %s, floodgate %s", where, ps.GetCode(), fs.GetCode())
		}
		if ps.GetLimitRemaining() != fs.GetLimitRemaining() {
			if w.code == rlsv3.RateLimitResponse_OVER_LIMIT && ps.GetLimitRemaining() == 0 {
				diffs["over-limit-remaining"]++
			} else {
				t.Errorf("%s.limit_remaining: peer %d, floodgate %d", where, ps.GetLimitRemaining(), fs.GetLimitRemaining())
			}
		}
		pd, fd := ps.GetDurationUntilReset(), fs.GetDurationUntilReset()
		switch {
		case (pd == nil) != (fd == nil):
			t.Errorf("%s.duration_until_reset: peer %v, floodgate %v", where, pd, fd)
		case pd != nil:
			if gap := pd.AsDuration() - fd.AsDuration(); gap < -resetSlack || gap > resetSlack {
				t.Errorf("%s.duration_until_reset: peer %v, floodgate %v", where, pd.AsDuration(), fd.AsDuration())
			}
		}
	}
	if fg.GetOverallCode() != overall {
		t.Errorf("%s: overall_code: floodgate %s, want %s", what, fg.GetOverallCode(), overall)
	}
	if !differs && peer.GetOverallCode() != fg.GetOverallCode() {
		t.Errorf("%s: overall_code: peer %s, floodgate %s", what, peer.GetOverallCode(), fg.GetOverallCode())
	}
	applies := ""
	for _, w := range want {
		if w.differs != "" {
			applies = w.differs
		}
	}
	if differs || applies != "" {
		// The headers and metadata describe counters that differ.
		if !proto.Equal(peer.GetDynamicMetadata(), fg.GetDynamicMetadata()) || len(peer.GetResponseHeadersToAdd()) != len(fg.GetResponseHeadersToAdd()) {
			diffs[applies]++
		}
		return
	}
	ph, fh := peer.GetResponseHeadersToAdd(), fg.GetResponseHeadersToAdd()
	// With LIMIT_RESPONSE_HEADERS_ENABLED (the peer sends headers), when
	// the peer's headers describe a shadow descriptor, floodgate's describe
	// the one the peer would pick among the others, or none.
	if all, enforced := peerPick(fg.GetStatuses(), want, false), peerPick(fg.GetStatuses(), want, true); len(ph) > 0 && all != enforced {
		diffs["shadow-not-in-headers"]++
		if len(ph) != 3 || ph[0].GetValue() != strconv.FormatUint(uint64(fg.Statuses[all].GetCurrentLimit().GetRequestsPerUnit()), 10) {
			t.Errorf("%s: the peer's headers %v do not describe statuses[%d], which the test takes for the peer's pick", what, ph, all)
		}
		ph = pickHeaders(ph, fg.GetStatuses(), enforced)
	}
	if len(ph) != len(fh) {
		t.Errorf("%s: response_headers_to_add: peer %v, floodgate %v", what, ph, fh)
	} else {
		for i := range ph {
			a, b := ph[i], fh[i]
			if a.GetKey() != b.GetKey() || a.GetValue() != b.GetValue() && !(strings.HasSuffix(a.GetKey(), "Reset") && closeSeconds(a.GetValue(), b.GetValue())) {
				t.Errorf("%s: response_headers_to_add[%d]: peer %s: %s, floodgate %s: %s", what, i, a.GetKey(), a.GetValue(), b.GetKey(), b.GetValue())
			}
		}
	}
	if !proto.Equal(peer.GetDynamicMetadata(), fg.GetDynamicMetadata()) {
		t.Errorf("%s: dynamic_metadata: peer %v, floodgate %v", what, peer.GetDynamicMetadata(), fg.GetDynamicMetadata())
	}
}

// peerPick returns the index of the status whose limit, remaining and
// reset envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED headers
// describe (src/service/ratelimit.go): among statuses with a current_limit,
// the first with the least limit_remaining, unless one is OVER_LIMIT: then
// the last such. -1 for none. With enforced, shadow descriptors are left
// out, as floodgate leaves them out (shadow-not-in-headers).
func peerPick(sts []*rlsv3.RateLimitResponse_DescriptorStatus, want []expected, enforced bool) int {
	pick, least := -1, uint32(math.MaxUint32)
	for i, st := range sts {
		if !want[i].limited || st.GetCurrentLimit() == nil || enforced && want[i].shadow {
			continue
		}
		if st.GetLimitRemaining() < least {
			pick, least = i, st.GetLimitRemaining()
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			pick, least = i, 0
		}
	}
	return pick
}

// pickHeaders returns the peer's headers (the names in like) for
// statuses[i], none for -1.
func pickHeaders(like []*corev3.HeaderValue, sts []*rlsv3.RateLimitResponse_DescriptorStatus, i int) []*corev3.HeaderValue {
	if i < 0 || len(like) != 3 {
		return nil
	}
	l := sts[i].GetCurrentLimit()
	sec := int64(envoy.UnitDuration(l.GetUnit()) / time.Second)
	return []*corev3.HeaderValue{
		{Key: like[0].GetKey(), Value: strconv.FormatUint(uint64(l.GetRequestsPerUnit()), 10)},
		{Key: like[1].GetKey(), Value: strconv.FormatUint(uint64(sts[i].GetLimitRemaining()), 10)},
		{Key: like[2].GetKey(), Value: strconv.FormatInt(sec-time.Now().Unix()%sec, 10)},
	}
}

// closeSeconds reports whether two whole numbers of seconds are at most 1
// apart (the two services read their clocks at different instants).
func closeSeconds(a, b string) bool {
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	return err1 == nil && err2 == nil && x-y <= 1 && y-x <= 1
}

func describe(l *rlsv3.RateLimitResponse_RateLimit) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf("name=%q %d/%s", l.GetName(), l.GetRequestsPerUnit(), l.GetUnit())
}

// TestDifferencesDocumented holds docs/ENVOY.md to the one list of
// deliberate differences and to the statsd names floodgate does not push:
// it names each.
func TestDifferencesDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ENVOY.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range append(slices.Clone(Differences), UnsentStats...) {
		if !strings.Contains(string(doc), "`"+df.Name+"`") {
			t.Errorf("docs/ENVOY.md does not list the deliberate difference `%s`", df.Name)
		}
	}
}
