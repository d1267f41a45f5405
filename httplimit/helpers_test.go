package httplimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clocktest"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
)

// epoch is a start time on a whole minute and hour, so fixed windows start
// with the test.
var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// env is a Limiter over a memory store on a manual clock, in front of a
// handler that counts the requests it serves.
type env struct {
	t      *testing.T
	clock  *clocktest.Manual
	store  *memory.Store
	lim    *httplimit.Limiter
	h      http.Handler
	served atomic.Int64
}

// newEnv builds an env; cfg.Store and cfg.Clock are filled in unless set.
func newEnv(t *testing.T, cfg httplimit.Config) *env {
	t.Helper()
	e := &env{t: t, clock: clocktest.NewManual(epoch)}
	e.store = memory.New(memory.WithClock(e.clock))
	if cfg.Store == nil {
		cfg.Store = e.store
	}
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.lim = lim
	e.h = lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.served.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	return e
}

// req describes a test request.
type req struct {
	remote string   // RemoteAddr; "" means 192.0.2.1:1234
	method string   // "" means GET
	path   string   // "" means /
	header []string // name, value pairs, added in order
}

func (e *env) do(q req) *httptest.ResponseRecorder {
	if q.remote == "" {
		q.remote = "192.0.2.1:1234"
	}
	if q.method == "" {
		q.method = http.MethodGet
	}
	if q.path == "" {
		q.path = "/"
	}
	r := httptest.NewRequest(q.method, "http://api.example"+q.path, nil)
	r.RemoteAddr = q.remote
	for i := 0; i+1 < len(q.header); i += 2 {
		r.Header.Add(q.header[i], q.header[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// remainingIn returns how much of limit is left for a store key, read by
// taking it all: the state is consumed, so call it last.
func remainingIn(t *testing.T, s floodgate.Store, key string, limit floodgate.Limit) int64 {
	t.Helper()
	d, err := s.Allow(context.Background(), key, limit)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed {
		return 0
	}
	return d.Remaining + 1
}

// rateLimit is a parsed RateLimit or RateLimit-Policy member.
type rateLimit struct {
	name   string
	params map[string]int64
}

// parseSF parses a RateLimit or RateLimit-Policy field with the Structured
// Fields library and checks its shape: a List of String items whose
// parameters are Integers.
func parseSF(t *testing.T, h http.Header, field string) []rateLimit {
	t.Helper()
	vals := h.Values(field)
	if len(vals) == 0 {
		return nil
	}
	list, err := httpsfv.UnmarshalList(vals)
	if err != nil {
		t.Fatalf("%s: %q does not parse as a Structured Fields List: %v", field, vals, err)
	}
	var out []rateLimit
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %v is not an Item", field, m)
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s: item %v is not a String", field, it.Value)
		}
		rl := rateLimit{name: name, params: map[string]int64{}}
		for _, k := range it.Params.Names() {
			v, _ := it.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s: parameter %s=%v is not an Integer", field, k, v)
			}
			rl.params[k] = n
		}
		out = append(out, rl)
	}
	return out
}

func headerInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	v := h.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not an integer", name, v)
	}
	return n
}

// constKey keys every request alike: one budget for all.
func constKey(k string) httplimit.KeyFunc {
	return func(*http.Request) (string, error) { return k, nil }
}
