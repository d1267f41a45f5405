package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-rl/floodgate/internal/rulecheck"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/problem"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/storewire"
	"github.com/floodgate-rl/floodgate/internal/tracing"
)

// DefaultStoreNamespace is the namespace of the store API's keys when
// StoreAPI.Namespace is empty.
const DefaultStoreNamespace = "@store|"

// StoreAPI configures the store API: POST /v1/store/allow, /v1/store/batch,
// /v1/store/refund and /v1/store/reset, which expose the server's store to
// remote clients (package remotestore) that cannot reach it directly.
//
// It is a store, not a decision: the client sends the limit and the key,
// and its own engine applies failure modes, shadow rules and all or
// nothing; the server's rules play no part. A client's key k is the store
// key Namespace+k, apart from the keys of the server's rules and of Envoy's
// service ("rls|").
//
// Anyone who can call it can spend or reset any key in its namespace:
// serve it only behind the API's authentication.
type StoreAPI struct {
	// Namespace is put before every key a client sends. It must not start
	// with a letter or digit, nor hold '{' or '}'. Empty:
	// DefaultStoreNamespace.
	Namespace string
	// Clock, if not nil, is the clock the server's store reads, and every
	// call must carry its time ("now_us"): the server sets the clock to it
	// and calls the store, one call at a time. It lets a client with its own
	// clock (tests, simulations) decide at its time. Nil: calls that carry a
	// time are refused, and the store reads its own clock.
	Clock SettableClock
}

// SettableClock is a clock the store API sets to each call's time before it
// calls the store, which reads it (clocktest.Manual is one).
type SettableClock interface {
	// Set moves the clock to t.
	Set(t time.Time)
}

// storeAPI is a StoreAPI checked and serving.
type storeAPI struct {
	store       floodgate.BatchStore
	ns          string
	clock       SettableClock
	mu          sync.Mutex // held around each call when clock is set
	metrics     *metrics
	unavailable time.Duration
	tracer      trace.Tracer // nil: not traced
}

func newStoreAPI(c *StoreAPI, store floodgate.Store, m *metrics, unavailable time.Duration) (*storeAPI, error) {
	bs, ok := store.(floodgate.BatchStore)
	if !ok {
		return nil, &ConfigError{Field: "Options.StoreAPI", Value: fmt.Sprintf("%T", store), Reason: "needs a store that decides batches (floodgate.BatchStore), as the memory and Redis stores do"}
	}
	ns := c.Namespace
	if ns == "" {
		ns = DefaultStoreNamespace
	}
	if b := ns[0]; b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' {
		return nil, &ConfigError{Field: "Options.StoreAPI.Namespace", Value: fmt.Sprintf("%q", ns), Reason: "must not start with a letter or digit, or its keys could meet a rule's; try " + fmt.Sprintf("%q", "@"+ns)}
	}
	if reason := rulecheck.KeyPrefix(ns); reason != "" {
		return nil, &ConfigError{Field: "Options.StoreAPI.Namespace", Value: fmt.Sprintf("%q", ns), Reason: reason}
	}
	return &storeAPI{store: bs, ns: ns, clock: c.Clock, metrics: m, unavailable: unavailable}, nil
}

// register adds the store API's endpoints to mux, each through guard
// (the server's token, content-type and in-flight checks).
func (a *storeAPI) register(mux *http.ServeMux, guard func(name string, h http.HandlerFunc) http.Handler) {
	for _, e := range []struct {
		path string
		h    http.HandlerFunc
	}{
		{storewire.PathAllow, a.handleAllow}, {storewire.PathBatch, a.handleBatch},
		{storewire.PathRefund, a.handleRefund}, {storewire.PathReset, a.handleReset},
	} {
		mux.Handle("POST "+e.path, guard(e.path, e.h))
	}
}

// overloaded answers a call over the server's in-flight cap as an outage,
// which the remote store's engine meets with the rule's failure mode.
func (a *storeAPI) overloaded(w http.ResponseWriter) {
	a.writeError(w, &storewire.Error{Kind: storewire.KindUnavailable, Detail: "the server is at its limit of concurrent requests; the store was not asked"})
}

// storeProblem is a problem answer of the store API: problem details with
// the error's kind, which the remote store maps back to the store's error.
type storeProblem struct {
	problem.Details
	Kind string `json:"kind"`
}

// writeError answers a store API call that failed.
func (a *storeAPI) writeError(w http.ResponseWriter, e *storewire.Error) {
	status := e.Status()
	if e.Kind == storewire.KindUnavailable {
		w.Header()[ratelimitheader.HeaderRetryAfter] = []string{ratelimitheader.RetryAfter(a.unavailable)}
	}
	body, _ := json.Marshal(storeProblem{Details: problem.Details{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: e.Detail}, Kind: e.Kind})
	w.Header()["Content-Type"] = []string{problem.ContentType}
	w.Header()["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func badRequest(detail string) *storewire.Error {
	return &storewire.Error{Kind: storewire.KindBadRequest, Detail: detail}
}

// read decodes a store API body; on failure it has answered.
func (a *storeAPI) read(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, storewire.MaxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			w.Header()["Connection"] = []string{"close"}
			a.writeError(w, badRequest(fmt.Sprintf("the body is over %d bytes", storewire.MaxBodyBytes)))
		} else {
			a.writeError(w, badRequest("the body is not valid JSON of the expected shape: "+err.Error()))
		}
		return false
	}
	return true
}

// item checks one request and returns its store key and limit.
func (a *storeAPI) item(req *storewire.Request) (string, floodgate.Limit, *storewire.Error) {
	key, err := req.StoreKey()
	if err != nil {
		return "", floodgate.Limit{}, badRequest(err.Error())
	}
	l, err := req.Limit.Limit()
	if err != nil {
		return "", floodgate.Limit{}, storewire.NewError(fmt.Errorf("limit: %w", err))
	}
	return a.ns + key, l, nil
}

// at runs call at the client's time nowUs when the API decides at the
// clients' times, and at the store's own time otherwise.
func (a *storeAPI) at(ctx context.Context, nowUs int64, op string, call func()) *storewire.Error {
	switch {
	case a.clock == nil && nowUs != 0:
		return badRequest(`"now_us" is accepted only by a server whose store API decides at the clients' times (StoreAPI.Clock); this one reads its own clock`)
	case a.clock != nil && nowUs <= 0:
		return badRequest(`"now_us" (the call's time in Unix microseconds) is required: this server decides at the clients' times`)
	}
	start := time.Now()
	if a.clock != nil {
		a.mu.Lock()
		a.clock.Set(time.UnixMicro(nowUs))
		defer a.mu.Unlock()
	}
	var span trace.Span
	if a.tracer != nil {
		// The server's side of a remote store's call, in the caller's
		// trace (its traceparent).
		_, span = a.tracer.Start(ctx, "floodgate.store_api."+strings.TrimPrefix(op, "store_"), trace.WithSpanKind(trace.SpanKindServer))
	}
	call()
	var sc trace.SpanContext
	if span != nil {
		sc = span.SpanContext()
		span.End()
	}
	tracing.Observe(a.metrics.storeLatency.WithLabelValues(op), sc, time.Since(start).Seconds())
	return nil
}

func (a *storeAPI) handleAllow(w http.ResponseWriter, r *http.Request) {
	var req storewire.Request
	if !a.read(w, r, &req) {
		return
	}
	key, l, e := a.item(&req)
	if e != nil {
		a.writeError(w, e)
		return
	}
	var d floodgate.Decision
	var err error
	if e := a.at(r.Context(), req.NowUs, "store_allow", func() { d, err = a.store.AllowN(r.Context(), key, l, req.Cost) }); e != nil {
		a.writeError(w, e)
		return
	}
	if err != nil {
		a.writeError(w, storewire.NewError(err))
		return
	}
	writeJSON(w, http.StatusOK, storewire.FromDecision(d))
}

func (a *storeAPI) handleRefund(w http.ResponseWriter, r *http.Request) {
	a.handleWrite(w, r, "store_refund", func(ctx context.Context, key string, l floodgate.Limit, n int64) error {
		return a.store.RefundN(ctx, key, l, n)
	})
}

func (a *storeAPI) handleReset(w http.ResponseWriter, r *http.Request) {
	a.handleWrite(w, r, "store_reset", func(ctx context.Context, key string, l floodgate.Limit, n int64) error {
		if n != 0 {
			return fmt.Errorf("%w: a reset takes no cost (got %d)", floodgate.ErrInvalidCost, n)
		}
		return a.store.Reset(ctx, key, l)
	})
}

// handleWrite answers refund and reset: 200 {} when call succeeds.
func (a *storeAPI) handleWrite(w http.ResponseWriter, r *http.Request, op string, call func(context.Context, string, floodgate.Limit, int64) error) {
	var req storewire.Request
	if !a.read(w, r, &req) {
		return
	}
	key, l, e := a.item(&req)
	if e != nil {
		a.writeError(w, e)
		return
	}
	var err error
	if e := a.at(r.Context(), req.NowUs, op, func() { err = call(r.Context(), key, l, req.Cost) }); e != nil {
		a.writeError(w, e)
		return
	}
	if err != nil {
		a.writeError(w, storewire.NewError(err))
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (a *storeAPI) handleBatch(w http.ResponseWriter, r *http.Request) {
	var req storewire.BatchRequest
	if !a.read(w, r, &req) {
		return
	}
	n := len(req.Items)
	if n == 0 || n > storewire.MaxBatchItems {
		a.writeError(w, badRequest(fmt.Sprintf(`"items" holds %d items; send 1 to %d`, n, storewire.MaxBatchItems)))
		return
	}
	// An item with an invalid limit gets its error, and the others are
	// decided without it, as a BatchStore does.
	resp := storewire.BatchResponse{Results: make([]storewire.BatchResult, n)}
	items, idx := make([]floodgate.BatchItem, 0, n), make([]int, 0, n)
	for i := range req.Items {
		it := &req.Items[i]
		if it.NowUs != 0 {
			a.writeError(w, badRequest(fmt.Sprintf(`items[%d]: "now_us" belongs to the batch, not to an item`, i)))
			return
		}
		key, l, e := a.item(it)
		switch {
		case e != nil && e.Kind == storewire.KindBadRequest:
			e.Detail = fmt.Sprintf("items[%d]: %s", i, e.Detail)
			a.writeError(w, e)
			return
		case e != nil:
			resp.Results[i].Error = e
		default:
			items = append(items, floodgate.BatchItem{Key: key, Limit: l, Cost: it.Cost})
			idx = append(idx, i)
		}
	}
	results := make([]floodgate.BatchResult, len(items))
	if e := a.at(r.Context(), req.NowUs, "store_batch", func() {
		if len(items) > 0 {
			a.store.AllowBatch(r.Context(), items, results)
		}
	}); e != nil {
		a.writeError(w, e)
		return
	}
	for j, res := range results {
		out := &resp.Results[idx[j]]
		if res.Err != nil {
			out.Error = storewire.NewError(res.Err)
		} else {
			d := storewire.FromDecision(res.Decision)
			out.Decision = &d
		}
		if res.RefundErr != nil {
			out.RefundError = storewire.NewError(res.RefundErr)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}
