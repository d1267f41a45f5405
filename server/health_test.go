package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/health"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

// readyz is the part of the /readyz body the tests read.
type readyz struct {
	State  string `json:"state"`
	Status int    `json:"status"`
	Store  struct {
		Connected bool   `json:"connected"`
		Error     string `json:"error"`
		Nodes     []struct {
			Addr      string `json:"addr"`
			Available bool   `json:"available"`
			Policy    string `json:"maxmemory_policy"`
			Evicting  bool   `json:"evicting"`
		} `json:"nodes"`
		Warnings []string `json:"warnings"`
	} `json:"store"`
}

func getReady(t *testing.T, srv *server.Server) (int, string, readyz) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	var got readyz
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/readyz body %q: %v", rec.Body.String(), err)
	}
	return rec.Code, rec.Header().Get("Content-Type"), got
}

func getMetrics(srv *server.Server) string {
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

func redisServer(t *testing.T, store *redisstore.Store) *server.Server {
	t.Helper()
	srv, err := server.New(store, policyOf(t, testConfig), server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestReadyzRedis: /readyz and the store metrics follow a real Redis: ready,
// degraded while it hangs (its breaker open), ready again after.
func TestReadyzRedis(t *testing.T) {
	rs := redistest.Spawn(t)
	store, err := redisstore.New(redisstore.Config{Addrs: []string{rs.Addr}, Mode: redisstore.ModeStandalone, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := redisServer(t, store)
	code, ct, got := getReady(t, srv)
	if code != 200 || ct != "application/json" || got.State != "ready" || !got.Store.Connected || len(got.Store.Nodes) != 1 || !got.Store.Nodes[0].Available {
		t.Fatalf("/readyz on a healthy Redis: %d %s %+v", code, ct, got)
	}
	if m := getMetrics(srv); !strings.Contains(m, "floodgate_store_connected 1") || !strings.Contains(m, `floodgate_store_node_available{node="`+rs.Addr+`"} 1`) {
		t.Errorf("metrics on a healthy Redis lack the store's state:\n%s", m)
	}

	rs.Stop(t)
	defer rs.Cont(t)
	for range 10 { // enough failed probes to open the breaker
		getReady(t, srv)
	}
	code, ct, got = getReady(t, srv)
	if code != 503 || ct != "application/problem+json" || got.State != "degraded" || got.Status != 503 || got.Store.Nodes[0].Available {
		t.Fatalf("/readyz on a hung Redis: %d %s %+v; want 503 degraded, the node unavailable", code, ct, got)
	}
	m := getMetrics(srv)
	if !strings.Contains(m, `floodgate_store_node_available{node="`+rs.Addr+`"} 0`) || !strings.Contains(m, `floodgate_store_node_breaker_opens_total{node="`+rs.Addr+`"} 1`) {
		t.Errorf("metrics on a hung Redis:\n%s", m)
	}

	rs.Cont(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _, got = getReady(t, srv); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 5s after Redis resumed: %d %+v", code, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyzStartDuringOutage: a server on a store started while Redis is
// down answers its rules by their failure mode and says degraded, with
// the reason, until Redis is up.
func TestReadyzStartDuringOutage(t *testing.T) {
	rs := redistest.Spawn(t)
	rs.Kill()
	store, err := redisstore.New(redisstore.Config{Addrs: []string{rs.Addr}, Mode: redisstore.ModeStandalone, LazyConnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := redisServer(t, store)
	code, _, got := getReady(t, srv)
	if code != 503 || got.State != "degraded" || got.Store.Connected || !strings.Contains(got.Store.Error, "connection refused") {
		t.Fatalf("/readyz before Redis is up: %d %+v; want 503 degraded, not connected, connection refused", code, got)
	}
	if m := getMetrics(srv); !strings.Contains(m, "floodgate_store_connected 0") {
		t.Errorf("metrics before Redis is up:\n%s", m)
	}
	f := &fixture{t: t, srv: srv, h: srv.Handler()}
	if rec := f.do("POST", "/v1/check", `{"rule":"api","key":"k"}`); rec.Code != 200 {
		t.Errorf("fail-open rule before Redis is up: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do("POST", "/v1/check", `{"rule":"login","key":"k"}`); rec.Code != 503 {
		t.Errorf("fail-closed rule before Redis is up: %d %s", rec.Code, rec.Body)
	}
	rs.Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _, got = getReady(t, srv); code == 200 && got.State == "ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 5s after Redis came up: %d %+v", code, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyzEvictionPolicy: a Redis that can evict any key leaves the
// server ready, with a warning in /readyz and a metric.
func TestReadyzEvictionPolicy(t *testing.T) {
	rs := redistest.Spawn(t, "--maxmemory-policy", "allkeys-lru")
	store, err := redisstore.New(redisstore.Config{Addrs: []string{rs.Addr}, Mode: redisstore.ModeStandalone})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := redisServer(t, store)
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _, got := getReady(t, srv)
		if code == 200 && got.State == "warning" {
			if len(got.Store.Warnings) != 1 || !got.Store.Nodes[0].Evicting || got.Store.Nodes[0].Policy != "allkeys-lru" {
				t.Errorf("/readyz: %+v; want one warning, the node evicting under allkeys-lru", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz on an allkeys-lru Redis: %d %+v; want 200 with state warning", code, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m := getMetrics(srv); !strings.Contains(m, `floodgate_store_node_evicting{node="`+rs.Addr+`",policy="allkeys-lru"} 1`) {
		t.Errorf("metrics lack the evicting node:\n%s", m)
	}
}

var _ health.Reporter = (*redisstore.Store)(nil)
