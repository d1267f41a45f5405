package envoy

import (
	"strings"
	"testing"
)

// peerStats returns the service's statsd totals by name.
func (e *env) peerStats() map[string]uint64 {
	got := map[string]uint64{}
	e.svc.PeerStats(func(name string, total uint64) {
		if _, dup := got[name]; dup {
			panic("PeerStats emitted " + name + " twice")
		}
		got[name] = total
	})
	return got
}

// TestPeerStatsNames: the statsd names and totals of the reference's
// statistics, from the same counts as the Prometheus series.
func TestPeerStatsNames(t *testing.T) {
	mem, _ := memoryStore()
	e := start(t, mem, true, Options{NearLimitRatio: 0.5}, peerRules)
	for range 12 {
		e.raw(t, request("p", desc("k=m")))
	}
	e.raw(t, request("p", desc("route=/api/v1", "user=u")))
	e.raw(t, request("p", desc("det=10.1.2.3:80|x")))
	e.raw(t, request("p", desc("det=a\nforged:1|c")))
	if _, err := e.client.ShouldRateLimit(t.Context(), request("")); err == nil {
		t.Fatal("an empty domain was accepted")
	}
	got := e.peerStats()
	for _, tc := range []struct {
		name string
		want uint64
	}{
		{"ratelimit.service.rate_limit.p.k.total_hits", 12},
		{"ratelimit.service.rate_limit.p.k.within_limit", 10},
		{"ratelimit.service.rate_limit.p.k.near_limit", 5},
		{"ratelimit.service.rate_limit.p.k.over_limit", 2},
		{"ratelimit.service.rate_limit.p.k.shadow_mode", 0},
		{"ratelimit.service.rate_limit.p.k.over_limit_with_local_cache", 0},
		// The whole key, where Prometheus labels only its first two parts.
		{"ratelimit.service.rate_limit.p.route_/api/v1.user.total_hits", 1},
		// The reference's sanitising: ':' '|' and the dots of an IPv4 address.
		{"ratelimit.service.rate_limit.p.det_10_1_2_3_80_x.total_hits", 1},
		// A newline cannot end the line and forge another.
		{"ratelimit.service.rate_limit.p.det_a_forged_1_c.total_hits", 1},
		{"ratelimit.service.config_load_success", 1},
		{"ratelimit.service.config_load_error", 0},
		{"ratelimit.service.global_shadow_mode", 0},
		{"ratelimit.service.call.should_rate_limit.service_error", 1},
		{"ratelimit.service.call.should_rate_limit.redis_error", 0},
		{"ratelimit_server.ShouldRateLimit.total_requests", 16},
	} {
		if v, ok := got[tc.name]; !ok || v != tc.want {
			t.Errorf("%s = %d (present %v), want %d", tc.name, v, ok, tc.want)
		}
	}
	// Every per-rule total is the sum of its Prometheus series.
	for name, v := range got {
		rest, ok := strings.CutPrefix(name, "ratelimit.service.rate_limit.p.")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, '.')
		stat, key := rest[i+1:], rest[:i]
		key1, _, _ := strings.Cut(key, ".")
		if prom := e.counter(t, "ratelimit_service_rate_limit_"+stat, "domain=p", "key1="+key1); uint64(prom) != v {
			t.Errorf("%s = %d, Prometheus %v", name, v, prom)
		}
	}
	if prom := e.counter(t, "ratelimit_service_rate_limit_total_hits", "domain=p", "key1=det_10_1_2_3_80_x", "key2="); prom != 1 {
		t.Errorf("the sanitised key's Prometheus series = %v, want 1", prom)
	}
}
