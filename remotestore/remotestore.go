// Package remotestore is a [floodgate.Store] (and [floodgate.BatchStore])
// that decides with a running `floodgate serve` over its store API, for Go
// programs that may not reach the server's Redis themselves: httplimit, the
// gRPC interceptors (package grpclimit) or any engine run their own rules,
// with the server's store holding the shared state.
//
//	store, err := remotestore.New(remotestore.Config{URL: "http://floodgate:8080", Token: os.Getenv("FLOODGATE_TOKEN")})
//	...
//	lim, err := httplimit.New(httplimit.Config{Store: store, Rules: rules})
//
// The server must serve the store API (`floodgate serve --store-api`, or
// server.Options.StoreAPI), which is off by default. Each call is one HTTP
// request (POST /v1/store/allow, /v1/store/batch, /v1/store/refund or
// /v1/store/reset) carrying the limit and the key; the server's own rules
// play no part. The server keeps these keys in a namespace of their own
// ("@store|" by default); a Config.KeyPrefix of httplimit (or grpclimit)
// keeps several applications apart within it.
//
// # Tracing
//
// A call whose context holds a span (the engine's store-call span, when
// its Options.TracerProvider is set) sends its W3C traceparent and
// tracestate, so the server's side of the call joins the caller's trace.
//
// # Failures
//
// Errors keep the store's kinds, so the engine's failure modes work:
//   - a server that cannot be reached, a call past Config.Timeout, or an
//     answer of 502, 503 or 504 matches [floodgate.ErrStoreUnavailable];
//   - 400 is the invalid input it names ([floodgate.ErrInvalidLimit],
//     [floodgate.ErrInvalidCost], [floodgate.ErrCostExceedsLimit]);
//   - a 500, a refused token (401, 403), a server without the store API
//     (404) or an unreadable answer is a store error matching none of
//     them, which never admits.
//
// Limits and costs are checked before any call, as every store checks them.
package remotestore

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
	"github.com/floodgate-rl/floodgate/internal/storewire"
	"github.com/floodgate-rl/floodgate/internal/tracing"
)

// Defaults for the zero fields of a Config.
const (
	// DefaultTimeout bounds each call: above the Redis store's own 50ms,
	// so the server's answer about an outage arrives before the client
	// gives up.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultMaxIdleConns is the number of idle keep-alive connections
	// kept to the server.
	DefaultMaxIdleConns = 64
)

// maxAnswerBytes bounds the answers read from the server.
const maxAnswerBytes = 1 << 20

// Config configures a Store. URL is required; every other zero field has a
// documented default.
type Config struct {
	// URL is the server's base URL, such as "http://floodgate:8080": http
	// or https, a host, and optionally a path prefix under which the API is
	// served.
	URL string
	// Token, if set, is sent with every call as "Authorization: Bearer
	// <Token>", for a server that requires one (the scope that decides).
	Token string
	// Timeout bounds each call, connecting included; passing it is an
	// outage (floodgate.ErrStoreUnavailable). Zero: DefaultTimeout.
	Timeout time.Duration
	// MaxIdleConns is the number of idle keep-alive connections kept to
	// the server; size it to the calls in flight. Zero: DefaultMaxIdleConns.
	MaxIdleConns int
	// TLS configures https connections (a private CA, a client
	// certificate). Nil: the system's roots.
	TLS *tls.Config
	// HTTPClient, if not nil, sends the calls instead of the Store's own
	// client, whose tuned transport MaxIdleConns and TLS configure.
	// Timeout applies either way.
	HTTPClient *http.Client
	// Clock, if not nil, sends its time with every call ("now_us"), for a
	// server whose store API decides at the clients' times
	// (server.StoreAPI.Clock, `floodgate serve --store-api-client-clock`):
	// tests and simulations. Any other server refuses such calls. Nil: the
	// server's store reads its own clock.
	Clock floodgate.Clock
}

// ConfigError reports a bad Config field, naming the field and its value.
type ConfigError struct {
	Field  string // such as "URL"
	Value  string // the bad value, formatted
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("remotestore: %s %s %s", e.Field, e.Value, e.Reason)
}

// Store decides with a floodgate server's store API. Create it with New; it
// is safe for concurrent use. Close releases its idle connections.
type Store struct {
	base    string // the URL, without a trailing slash
	auth    []string
	timeout time.Duration
	client  *http.Client
	clock   floodgate.Clock
}

var _ floodgate.BatchStore = (*Store)(nil)

// New checks cfg and returns its Store. It does not contact the server. The
// error is a *ConfigError.
func New(cfg Config) (*Store, error) {
	u, err := url.Parse(cfg.URL)
	switch {
	case cfg.URL == "":
		return nil, &ConfigError{Field: "URL", Value: `""`, Reason: `is required, such as "http://127.0.0.1:8080"`}
	case err != nil:
		return nil, &ConfigError{Field: "URL", Value: fmt.Sprintf("%q", cfg.URL), Reason: "is not a URL: " + err.Error()}
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, &ConfigError{Field: "URL", Value: fmt.Sprintf("%q", cfg.URL), Reason: `must be an http:// or https:// URL, such as "http://127.0.0.1:8080"`}
	case u.Host == "":
		return nil, &ConfigError{Field: "URL", Value: fmt.Sprintf("%q", cfg.URL), Reason: "has no host"}
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, &ConfigError{Field: "URL", Value: fmt.Sprintf("%q", cfg.URL), Reason: "must hold no query, fragment or user (send a token with Token)"}
	}
	if cfg.Timeout < 0 {
		return nil, &ConfigError{Field: "Timeout", Value: cfg.Timeout.String(), Reason: "must not be negative (0 means " + DefaultTimeout.String() + ")"}
	}
	if cfg.MaxIdleConns < 0 {
		return nil, &ConfigError{Field: "MaxIdleConns", Value: fmt.Sprint(cfg.MaxIdleConns), Reason: fmt.Sprintf("must not be negative (0 means %d)", DefaultMaxIdleConns)}
	}
	if strings.ContainsAny(cfg.Token, "\r\n") {
		return nil, &ConfigError{Field: "Token", Value: "(redacted)", Reason: "must not hold a line break"}
	}
	s := &Store{base: strings.TrimSuffix(u.String(), "/"), timeout: cfg.Timeout, client: cfg.HTTPClient, clock: cfg.Clock}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if cfg.Token != "" {
		s.auth = []string{"Bearer " + cfg.Token}
	}
	if s.client == nil {
		idle := cfg.MaxIdleConns
		if idle == 0 {
			idle = DefaultMaxIdleConns
		}
		s.client = &http.Client{Transport: &http.Transport{
			// A store call goes straight to the server: no proxy from the
			// environment in the way of every decision.
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: s.timeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     cfg.TLS,
			ForceAttemptHTTP2:   true,
			MaxIdleConns:        idle,
			MaxIdleConnsPerHost: idle,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}}
	}
	return s, nil
}

// Timeout returns the bound of every call: Config.Timeout, or
// DefaultTimeout. The library front ends (httplimit, grpclimit) refuse a
// Timeout of their own at or above it, which would never end a call first.
func (s *Store) Timeout() time.Duration { return s.timeout }

// Close closes the Store's idle connections. Calls after Close open new
// ones.
func (s *Store) Close() { s.client.CloseIdleConnections() }

// now returns the time a call carries: the Clock's in Unix microseconds, or
// 0 without one.
func (s *Store) now() int64 {
	if s.clock == nil {
		return 0
	}
	return s.clock.Now().UnixMicro()
}

// Allow is AllowN with a cost of 1.
func (s *Store) Allow(ctx context.Context, key string, limit floodgate.Limit) (floodgate.Decision, error) {
	return s.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether a request of cost n fits limit for key on the
// server, and records it there if so. See floodgate.Store.
func (s *Store) AllowN(ctx context.Context, key string, limit floodgate.Limit, n int64) (floodgate.Decision, error) {
	if d, err := limitcheck.Allow(limit, n); err != nil {
		return d, err
	}
	req := storewire.NewRequest(key, limit, n)
	req.NowUs = s.now()
	var d storewire.Decision
	if err := s.call(ctx, storewire.PathAllow, &req, &d); err != nil {
		if errors.Is(err, floodgate.ErrCostExceedsLimit) {
			return floodgate.Decision{Limit: limit.Quota}, err
		}
		return floodgate.Decision{}, err
	}
	return d.Decision(), nil
}

// RefundN gives back n units of quota to key under limit on the server.
// See floodgate.Store.
func (s *Store) RefundN(ctx context.Context, key string, limit floodgate.Limit, n int64) error {
	if _, err := limitcheck.Allow(limit, n); err != nil {
		return err
	}
	req := storewire.NewRequest(key, limit, n)
	req.NowUs = s.now()
	return s.call(ctx, storewire.PathRefund, &req, &struct{}{})
}

// Reset clears key's state under limit's algorithm on the server.
func (s *Store) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	req := storewire.NewRequest(key, limit, 0)
	req.NowUs = s.now()
	return s.call(ctx, storewire.PathReset, &req, &struct{}{})
}

// AllowBatch decides items as one request in one call to the server, whose
// store decides them all or nothing. Items with an invalid limit or cost
// get their error without a call and are otherwise skipped; when the call
// fails, every other item gets its error, as does every item of a batch of
// more than 256 valid items, which the store API does not take. See
// floodgate.BatchStore. It panics if results is shorter than items.
func (s *Store) AllowBatch(ctx context.Context, items []floodgate.BatchItem, results []floodgate.BatchResult) {
	if len(results) < len(items) {
		panic("remotestore: AllowBatch with fewer results than items")
	}
	req := storewire.BatchRequest{Items: make([]storewire.Request, 0, len(items)), NowUs: s.now()}
	idx := make([]int, 0, len(items))
	for i, it := range items {
		d, err := limitcheck.Item(it.Limit, it.Cost)
		results[i] = floodgate.BatchResult{Decision: d, Err: err}
		if err == nil {
			req.Items = append(req.Items, storewire.NewRequest(it.Key, it.Limit, it.Cost))
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	var resp storewire.BatchResponse
	var err error
	if len(idx) > storewire.MaxBatchItems {
		// Not split: the halves would not be all or nothing.
		err = fmt.Errorf("remotestore: a batch of %d items is over the store API's %d", len(idx), storewire.MaxBatchItems)
	} else {
		err = s.call(ctx, storewire.PathBatch, &req, &resp)
	}
	if err == nil && len(resp.Results) != len(idx) {
		err = fmt.Errorf("remotestore: the server answered %d results for a batch of %d", len(resp.Results), len(idx))
	}
	for j, i := range idx {
		r := &results[i]
		switch {
		case err != nil:
			r.Err = err
		case resp.Results[j].Decision != nil:
			r.Decision = resp.Results[j].Decision.Decision()
		case resp.Results[j].Error != nil:
			r.Err = resp.Results[j].Error.Err()
			if errors.Is(r.Err, floodgate.ErrCostExceedsLimit) {
				r.Decision.Limit = items[i].Limit.Quota
			}
		default:
			r.Err = fmt.Errorf("remotestore: the server answered item %d with neither a decision nor an error", j)
		}
		if err == nil && resp.Results[j].RefundError != nil {
			r.RefundErr = resp.Results[j].RefundError.Err()
		}
	}
}

// call POSTs body to the API's path and decodes a 200 answer into out.
func (s *Store) call(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("remotestore: encoding the call: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("remotestore: %w", err)
	}
	req.Header["Content-Type"] = []string{"application/json"}
	if s.auth != nil {
		req.Header["Authorization"] = s.auth
	}
	tracing.Inject(ctx, req.Header)
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: remotestore: %w", floodgate.ErrStoreUnavailable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%w: remotestore: reading the answer: %w", floodgate.ErrStoreUnavailable, err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("remotestore: %s %s: the answer is not the store API's: %w", req.Method, path, err)
		}
		return nil
	}
	return answerError(resp.StatusCode, path, data)
}

// answerError maps a failed call's answer to the store's error kinds: by the
// problem's kind when the store API sent one, by the status otherwise.
func answerError(status int, path string, data []byte) error {
	var p struct {
		Detail string `json:"detail"`
		Kind   string `json:"kind"`
	}
	_ = json.Unmarshal(data, &p) // a proxy's page is no problem: the status decides
	if p.Kind != "" && p.Kind != storewire.KindBadRequest {
		return (&storewire.Error{Kind: p.Kind, Detail: p.Detail}).Err()
	}
	detail := p.Detail
	if detail == "" {
		detail = strings.TrimSpace(string(data[:min(len(data), 200)]))
	}
	msg := fmt.Sprintf("remotestore: POST %s: %d %s: %s", path, status, http.StatusText(status), detail)
	switch status {
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return fmt.Errorf("%w: %s", floodgate.ErrStoreUnavailable, msg)
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return errors.New(msg + " (does the server serve the store API? floodgate serve --store-api)")
	case http.StatusUnauthorized, http.StatusForbidden:
		return errors.New(msg + " (check Config.Token)")
	}
	return errors.New(msg)
}
