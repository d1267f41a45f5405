package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// The middleware in front of a ServeMux: two requests a minute per client
// address, health checks exempt.
func Example() {
	lim, err := httplimit.New(httplimit.Config{
		Store: memory.New(),
		Rules: []httplimit.Rule{{Name: "per-ip", Limit: floodgate.PerMinute(2)}},
		Skip:  func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	handler := lim.Handler(mux) // serve it: http.ListenAndServe(addr, handler)

	for range 3 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil)) // from 192.0.2.1
		fmt.Println(strings.TrimSpace(fmt.Sprintln(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))))
		if w.Code == http.StatusTooManyRequests {
			fmt.Print(w.Header().Get("Content-Type"), " ", w.Body.String())
		}
	}
	// Output:
	// 200 "per-ip";q=2;w=60 "per-ip";r=1;t=60
	// 200 "per-ip";q=2;w=60 "per-ip";r=0;t=60
	// 429 "per-ip";q=2;w=60 "per-ip";r=0;t=60 60
	// application/problem+json {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"The request exceeds the quota of policy \"per-ip\": 2 per 1m0s (sliding_window_log). Retry after the number of seconds in Retry-After.","violated-policies":["per-ip"]}
}

type userKey struct{}

// Several rules on one request: per client address, per API key, per
// authenticated user, and a stricter one for logins that fails closed. A
// request passes only if every rule that applies allows it; a request that
// one rule denies uses up no quota of the others.
func Example_rules() {
	ips, err := clientip.New(clientip.Resolver{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		panic(err)
	}
	lim, err := httplimit.New(httplimit.Config{
		Store:    memory.New(),
		ClientIP: ips, // requests come through a load balancer in 10.0.0.0/8
		Rules: []httplimit.Rule{
			{Name: "per-ip", Limit: floodgate.PerMinute(100)},
			{Name: "per-key", Limit: floodgate.PerHour(1000), Key: httplimit.Header("X-API-Key")},
			{Name: "per-user", Limit: floodgate.NewTokenBucket(20, 1, floodgate.PerSecond(1).Window), Key: httplimit.ContextValue(userKey{})},
			{
				Name: "login", Limit: floodgate.PerMinute(5), Methods: []string{"POST"}, Paths: []string{"/login"},
				Failure: httplimit.FailClosed,
			},
		},
	})
	if err != nil {
		panic(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	// An authentication middleware, running before the limiter, stores the
	// user in the request's context.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-User"); u != "" {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
			next.ServeHTTP(w, r)
		})
	}
	handler := auth(lim.Handler(app))

	r := httptest.NewRequest("GET", "/items", nil)
	r.RemoteAddr = "10.0.0.7:40000"
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	r.Header.Set("X-API-Key", "k-123")
	r.Header.Set("X-User", "alice")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	fmt.Println(w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Header().Get("RateLimit"))
	// Output:
	// "per-ip";q=100;w=60, "per-key";q=1000;w=3600, "per-user";q=20;w=20
	// "per-user";r=19;t=1
}

// A tenant-wide quota that every instance of the service shares through
// Redis, decided from leased blocks at memory speed: each instance takes
// blocks of the limit from Redis and spends them in memory. Close gives
// back what the leases hold when the service stops. (It needs a Redis, so
// it is compiled, not run.)
func Example_lease() {
	store, err := redisstore.New(redisstore.Config{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lim, err := httplimit.New(httplimit.Config{
		Store: store,
		Rules: []httplimit.Rule{{
			Name:  "tenant",
			Limit: floodgate.NewLimit(floodgate.FixedWindow, 600_000, time.Minute),
			Key:   httplimit.Header("X-Tenant"),
			Lease: &decide.LeaseOptions{}, // the defaults: blocks of up to 10% of the limit
		}},
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())
	http.Handle("/", lim.Handler(http.NotFoundHandler()))
}
