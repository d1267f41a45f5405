package routertest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
	"github.com/labstack/echo/v4"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
)

func newLimiter(t *testing.T) *httplimit.Limiter {
	t.Helper()
	lim, err := httplimit.New(httplimit.Config{
		Store: memory.New(),
		Rules: []httplimit.Rule{
			{Name: "per-ip", Limit: floodgate.PerMinute(2)},
			{Name: "items", Limit: floodgate.PerMinute(1), Paths: []string{"/items/"}, Methods: []string{"POST"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func TestRouters(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }
	routers := map[string]func(lim *httplimit.Limiter) http.Handler{
		"chi": func(lim *httplimit.Limiter) http.Handler {
			r := chi.NewRouter()
			r.Use(lim.Handler)
			r.Get("/items/{id}", ok)
			r.Post("/items/{id}", ok)
			return r
		},
		"gorilla/mux": func(lim *httplimit.Limiter) http.Handler {
			r := mux.NewRouter()
			r.Use(lim.Handler)
			r.HandleFunc("/items/{id}", ok).Methods("GET", "POST")
			return r
		},
		"echo": func(lim *httplimit.Limiter) http.Handler {
			e := echo.New()
			e.Use(echo.WrapMiddleware(lim.Handler))
			h := func(c echo.Context) error { return c.NoContent(http.StatusOK) }
			e.GET("/items/:id", h)
			e.POST("/items/:id", h)
			return e
		},
	}
	for name, build := range routers {
		t.Run(name, func(t *testing.T) {
			h := build(newLimiter(t))
			steps := []struct {
				method   string
				want     int
				policies string
			}{
				{"POST", http.StatusOK, `"per-ip";q=2;w=60, "items";q=1;w=60`},
				{"POST", http.StatusTooManyRequests, `"per-ip";q=2;w=60, "items";q=1;w=60`}, // items denies; per-ip refunded
				{"GET", http.StatusOK, `"per-ip";q=2;w=60`},
				{"GET", http.StatusTooManyRequests, `"per-ip";q=2;w=60`},
			}
			for i, s := range steps {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(s.method, "/items/42", nil))
				if w.Code != s.want {
					t.Errorf("step %d: %s answered %d, want %d", i, s.method, w.Code, s.want)
				}
				if got := w.Header().Get("RateLimit-Policy"); got != s.policies {
					t.Errorf("step %d: RateLimit-Policy %q, want %q", i, got, s.policies)
				}
				if s.want == http.StatusTooManyRequests && w.Header().Get("Content-Type") != "application/problem+json" {
					t.Errorf("step %d: Content-Type %q", i, w.Header().Get("Content-Type"))
				}
			}
		})
	}
}
