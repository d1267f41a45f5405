package remotestore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/server"
)

// apiServer serves the store API of a server.Server over store on a
// loopback port, behind wrap (nil: none).
func apiServer(t *testing.T, store floodgate.Store, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	srv, err := server.New(store, server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg   remotestore.Config
		field string
	}{
		{remotestore.Config{}, "URL"},
		{remotestore.Config{URL: "127.0.0.1:8080"}, "URL"},
		{remotestore.Config{URL: "ftp://host"}, "URL"},
		{remotestore.Config{URL: "http://"}, "URL"},
		{remotestore.Config{URL: "http://host/?q=1"}, "URL"},
		{remotestore.Config{URL: "http://u:p@host"}, "URL"},
		{remotestore.Config{URL: "http://host", Timeout: -time.Second}, "Timeout"},
		{remotestore.Config{URL: "http://host", MaxIdleConns: -1}, "MaxIdleConns"},
		{remotestore.Config{URL: "http://host", Token: "a\nb"}, "Token"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s=%+v", c.field, c.cfg), func(t *testing.T) {
			_, err := remotestore.New(c.cfg)
			var ce *remotestore.ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field {
				t.Fatalf("New(%+v) = %v, want a *ConfigError for %s", c.cfg, err, c.field)
			}
			if c.field == "Token" && strings.Contains(err.Error(), "a\nb") {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
}

// TestErrorKinds: every way a call can fail maps to the store's error
// kinds, so the engine's failure modes apply to outages only.
func TestErrorKinds(t *testing.T) {
	l := floodgate.PerMinute(5)
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	// A server that never answers in time.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	t.Cleanup(hang.Close)
	status := func(code int, body string) string {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(ts.Close)
		return ts.URL
	}
	// A Redis that stops answering: the server's store is unavailable.
	stopped := redistest.Spawn(t)
	rs, err := redisstore.New(redisstore.Config{Addrs: []string{stopped.Addr}, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	outage := apiServer(t, rs, nil)
	stopped.Stop(t)
	t.Cleanup(func() { stopped.Cont(t) })

	cases := []struct {
		name string
		url  string
		want error // nil: a store error of no sentinel kind
	}{
		{"connection refused", closed, floodgate.ErrStoreUnavailable},
		{"timeout", hang.URL, floodgate.ErrStoreUnavailable},
		{"redis outage behind the server", outage, floodgate.ErrStoreUnavailable},
		{"503 from a proxy", status(503, "<html>down</html>"), floodgate.ErrStoreUnavailable},
		{"502", status(502, ""), floodgate.ErrStoreUnavailable},
		{"504", status(504, ""), floodgate.ErrStoreUnavailable},
		{"500", status(500, `{"status":500,"kind":"store_error","detail":"bad script reply"}`), nil},
		{"500 without a kind", status(500, "oops"), nil},
		{"401", status(401, `{"status":401,"detail":"missing bearer token"}`), nil},
		{"404", status(404, "not found"), nil},
		{"200 that is not JSON", status(200, "<html>"), nil},
		{"400 invalid cost", status(400, `{"status":400,"kind":"invalid_cost","detail":"cost 0"}`), floodgate.ErrInvalidCost},
		{"400 invalid limit", status(400, `{"status":400,"kind":"invalid_limit","detail":"quota"}`), floodgate.ErrInvalidLimit},
		{"400 cost exceeds limit", status(400, `{"status":400,"kind":"cost_exceeds_limit","detail":"cost 9"}`), floodgate.ErrCostExceedsLimit},
		{"400 bad request", status(400, `{"status":400,"kind":"bad_request","detail":"not JSON"}`), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const timeout = 200 * time.Millisecond
			s := newStore(t, remotestore.Config{URL: c.url, Timeout: timeout})
			start := time.Now()
			d, err := s.Allow(t.Context(), "k", l)
			if elapsed := time.Since(start); elapsed > timeout+5*time.Second {
				t.Errorf("Allow took %s, want within the timeout %s and a margin", elapsed, timeout)
			}
			if err == nil || d.Allowed {
				t.Fatalf("Allow = %+v, %v; want an error and not allowed", d, err)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Allow error %v, want one matching %v", err, c.want)
			}
			if c.want == nil && isKind(err) {
				t.Fatalf("Allow error %v matches a sentinel; want a plain store error, which never admits", err)
			}
			for name, call := range map[string]func() error{
				"RefundN": func() error { return s.RefundN(t.Context(), "k", l, 1) },
				"Reset":   func() error { return s.Reset(t.Context(), "k", l) },
				"AllowBatch": func() error {
					items := []floodgate.BatchItem{{Key: "a", Limit: l, Cost: 1}, {Key: "b", Limit: l, Cost: 1}}
					res := make([]floodgate.BatchResult, 2)
					s.AllowBatch(t.Context(), items, res)
					if (res[0].Err == nil) != (res[1].Err == nil) {
						return fmt.Errorf("items disagree: %v / %v", res[0].Err, res[1].Err)
					}
					return res[0].Err
				},
			} {
				if c.name == "200 that is not JSON" || strings.HasPrefix(c.name, "400 ") {
					continue // the canned answers are allow's
				}
				err := call()
				if err == nil || (c.want != nil) != errors.Is(err, c.want) || c.want == nil && isKind(err) {
					t.Errorf("%s error %v, want kind %v", name, err, c.want)
				}
			}
		})
	}
}

// TestToken: the token goes out as a bearer token with every call.
func TestToken(t *testing.T) {
	var refused atomic.Int64
	url := apiServer(t, memory.New(), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				refused.Add(1)
				http.Error(w, `{"status":401,"detail":"bad token"}`, http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	l := floodgate.PerMinute(2)
	good := newStore(t, remotestore.Config{URL: url, Token: "s3cret"})
	if d, err := good.Allow(t.Context(), "k", l); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("Allow with the token = %+v, %v", d, err)
	}
	bad := newStore(t, remotestore.Config{URL: url, Token: "wrong"})
	if _, err := bad.Allow(t.Context(), "k", l); err == nil || isKind(err) || !strings.Contains(err.Error(), "Token") {
		t.Fatalf("Allow with a wrong token: %v; want a store error naming Config.Token", err)
	}
	if got := refused.Load(); got != 1 {
		t.Fatalf("refused %d calls, want 1", got)
	}
}

// TestNamespace: the server keeps the store API's keys under its
// namespace, apart from its own rules' keys.
func TestNamespace(t *testing.T) {
	store := memory.New()
	url := apiServer(t, store, nil)
	s := newStore(t, remotestore.Config{URL: url})
	l := floodgate.PerMinute(3)
	if _, err := s.AllowN(t.Context(), "per-ip|1.2.3.4", l, 2); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, _ := store.AllowN(ctx, "per-ip|1.2.3.4", l, 3); !d.Allowed {
		t.Errorf("the server's own key was spent by a remote client")
	}
	if d, _ := store.AllowN(ctx, server.DefaultStoreNamespace+"per-ip|1.2.3.4", l, 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("the namespaced key = %+v, want the client's 2 of 3 spent", d)
	}
	for _, ns := range []string{"store|", "9", "@{x}"} {
		if _, err := server.New(store, server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{Namespace: ns}}); err == nil || !strings.Contains(err.Error(), "Namespace") {
			t.Errorf("namespace %q: %v, want an error naming Namespace", ns, err)
		}
	}
}

// TestKeepAlive: calls reuse their connections: 32 concurrent callers
// making 50 calls each open about one connection each, not one per call.
func TestKeepAlive(t *testing.T) {
	srv, err := server.New(memory.New(), server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}})
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	s := newStore(t, remotestore.Config{URL: ts.URL, Timeout: 10 * time.Second})
	const callers, each = 32, 50
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range callers {
		wg.Go(func() {
			for range each {
				d, err := s.Allow(t.Context(), "shared", floodgate.PerHour(1000))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Errorf("admitted %d of %d, want exactly 1000", got, callers*each)
	}
	if got := conns.Load(); got > 2*callers {
		t.Fatalf("%d calls opened %d connections, want at most %d: keep-alive is not working", callers*each, got, 2*callers)
	}
}

// TestBatchTooLong: a batch over the API's bound fails whole, without a
// call, as a store error: splitting it would not be all or nothing.
func TestBatchTooLong(t *testing.T) {
	var calls atomic.Int64
	url := apiServer(t, memory.New(), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); next.ServeHTTP(w, r) })
	})
	s := newStore(t, remotestore.Config{URL: url})
	items := make([]floodgate.BatchItem, 257)
	for i := range items {
		items[i] = floodgate.BatchItem{Key: fmt.Sprint(i), Limit: floodgate.PerMinute(1), Cost: 1}
	}
	results := make([]floodgate.BatchResult, len(items))
	s.AllowBatch(t.Context(), items, results)
	for i, r := range results {
		if r.Err == nil || isKind(r.Err) || r.Decision.Allowed {
			t.Fatalf("item %d: %+v, want a store error", i, r)
		}
	}
	if calls.Load() != 0 {
		t.Fatalf("%d calls, want none", calls.Load())
	}
}
