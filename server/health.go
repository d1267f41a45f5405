package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/health"
	"github.com/floodgate-rl/floodgate/internal/problem"
)

// Readiness states, the "state" member of the /readyz body.
const (
	readyState    = "ready"    // the store answers; no warning
	warningState  = "warning"  // the store answers, but its backend puts limits at risk (an evicting policy)
	degradedState = "degraded" // the store does not answer, or some of its nodes do not: rules follow their failure mode
)

// readyBody is the /readyz body for a store that reports its health: a
// problem (RFC 9457) when not ready, plain JSON otherwise.
type readyBody struct {
	Type   string `json:"type,omitempty"`
	Title  string `json:"title,omitempty"`
	Status int    `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Kind and RequestID are a failed probe's, as in every 5xx answer.
	Kind      string      `json:"kind,omitempty"`
	RequestID string      `json:"request_id,omitempty"`
	State     string      `json:"state"`
	Store     storeHealth `json:"store"`
}

// storeHealth is health.Report in the /readyz body.
type storeHealth struct {
	Connected bool         `json:"connected"`
	Error     string       `json:"error,omitempty"`
	Nodes     []nodeHealth `json:"nodes,omitempty"`
	Warnings  []string     `json:"warnings,omitempty"`
}

type nodeHealth struct {
	Addr                string `json:"addr"`
	Available           bool   `json:"available"`
	ConsecutiveFailures int64  `json:"consecutive_failures"`
	BreakerOpens        int64  `json:"breaker_opens"`
	InFlight            int    `json:"in_flight"`
	LastError           string `json:"last_error,omitempty"`
	EvictionPolicy      string `json:"maxmemory_policy,omitempty"`
	Evicting            bool   `json:"evicting"`
}

func newStoreHealth(h health.Report) storeHealth {
	out := storeHealth{Connected: h.Connected, Error: h.Error, Warnings: h.Warnings}
	for _, n := range h.Nodes {
		out.Nodes = append(out.Nodes, nodeHealth{
			Addr: n.Addr, Available: n.Available, ConsecutiveFailures: n.ConsecutiveFailures, BreakerOpens: n.Opens,
			InFlight: n.InFlight, LastError: n.LastError, EvictionPolicy: n.EvictionPolicy, Evicting: n.Evicting,
		})
	}
	return out
}

// readyLimit is the limit readiness probes reset a key under: a Reset is one
// harmless round trip to the store.
var readyLimit = floodgate.PerSecond(1)

// handleReady answers /readyz: 200 when the store answers a round trip
// (and, for a store that reports its health, every node is available),
// 503 otherwise. A store that reports its health gets a JSON body with its
// state ("ready", "warning" or "degraded") and its nodes.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	err := s.store.Reset(r.Context(), "\x00floodgate-readyz", readyLimit)
	s.metrics.storeLatency.WithLabelValues("ready").Observe(time.Since(start).Seconds())
	hr, ok := s.store.(health.Reporter)
	if !ok {
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, problem.KindStoreUnavailable, "the store is not reachable (the server's log has the error under the request id)", err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ready\n"))
		return
	}
	h := hr.Health()
	body := readyBody{State: readyState, Store: newStoreHealth(h)}
	status := http.StatusOK
	switch {
	case err != nil || !h.Available():
		status = http.StatusServiceUnavailable
		body.State, body.Type, body.Title, body.Status = degradedState, "about:blank", http.StatusText(status), status
		body.Detail = "the store does not answer for every key: rules follow their failure mode"
		if err != nil {
			body.Kind, body.RequestID = problem.KindStoreUnavailable, problem.NewRequestID()
			body.Detail += " (the server's log has the error under the request id)"
			w.Header()[problem.HeaderRequestID] = []string{body.RequestID}
			s.logFailure(r, status, body.Kind, body.RequestID, err)
		}
	case len(h.Warnings) > 0:
		body.State = warningState
	}
	out, _ := json.Marshal(body) // every field marshals
	ct := "application/json"
	if status != http.StatusOK {
		ct = problem.ContentType
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(out)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(out, '\n'))
}

// healthCollector exports a health.Reporter's state at every scrape.
type healthCollector struct {
	store                                    health.Reporter
	connected, available, inFlight, failures *prometheus.Desc
	opens, evicting                          *prometheus.Desc
}

func newHealthCollector(store health.Reporter) *healthCollector {
	node := []string{"node"}
	return &healthCollector{
		store:     store,
		connected: prometheus.NewDesc("floodgate_store_connected", "1 once the store has connected to its backend (0 while a store started during an outage waits for it).", nil, nil),
		available: prometheus.NewDesc("floodgate_store_node_available", "1 while the node's circuit breaker is closed, 0 while it is open (its keys fail at once as unavailable).", node, nil),
		inFlight:  prometheus.NewDesc("floodgate_store_node_in_flight", "Calls to the node waiting for a reply, those whose callers gave up included.", node, nil),
		failures:  prometheus.NewDesc("floodgate_store_node_consecutive_failures", "Calls to the node that failed in a row (timeouts, broken connections).", node, nil),
		opens:     prometheus.NewDesc("floodgate_store_node_breaker_opens_total", "Times the node's circuit breaker opened.", node, nil),
		evicting:  prometheus.NewDesc("floodgate_store_node_evicting", "1 when the node's maxmemory-policy can evict rate-limit keys (allkeys-*), which resets their limits.", []string{"node", "policy"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connected, c.available, c.inFlight, c.failures, c.opens, c.evicting} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.store.Health()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, b(h.Connected))
	for _, n := range h.Nodes {
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, b(n.Available), n.Addr)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(n.InFlight), n.Addr)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.GaugeValue, float64(n.ConsecutiveFailures), n.Addr)
		ch <- prometheus.MustNewConstMetric(c.opens, prometheus.CounterValue, float64(n.Opens), n.Addr)
		if n.EvictionPolicy != "" {
			ch <- prometheus.MustNewConstMetric(c.evicting, prometheus.GaugeValue, b(n.Evicting), n.Addr, n.EvictionPolicy)
		}
	}
}
