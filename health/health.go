// Package health is how a store reports on its backend without a round
// trip: whether it has connected, each node's circuit breaker and calls in
// flight, and configuration that puts the limits at risk. Readiness probes
// (`floodgate serve`'s /readyz) and metrics read it through [Reporter]; the
// Redis store and the split store implement it, the memory store, which has
// no backend, does not.
package health

// Reporter is implemented by stores that can say how their backend is
// doing without a round trip.
type Reporter interface {
	// Health returns a snapshot of the store's view of its backend. It
	// never blocks on the backend and is safe for concurrent use.
	Health() Report
}

// Report is a store's view of its backend, as [Reporter] returns it.
type Report struct {
	// Connected reports whether the store has connected to its backend at
	// least once since it was created. A store started during an outage
	// is not connected until the backend first answers.
	Connected bool
	// Error is why the store cannot connect ("" when Connected): an
	// unreachable address, a refused password, ...
	Error string
	// Nodes are the backend's nodes, in a stable order: one for a single
	// server or Sentinel, every primary of a cluster.
	Nodes []Node
	// Warnings are configuration problems found on the backend that put
	// the limits at risk, such as an eviction policy that can delete the
	// limiter's keys.
	Warnings []string
}

// Available reports whether every node of a connected store is answering.
func (r Report) Available() bool {
	if !r.Connected {
		return false
	}
	for _, n := range r.Nodes {
		if !n.Available {
			return false
		}
	}
	return true
}

// Node is one backend node's state in a [Report].
type Node struct {
	// Addr is the node's address (host:port), or a description such as
	// "sentinel primary mymaster".
	Addr string
	// Available is false while the node's circuit breaker is open: calls
	// for its keys fail at once as unavailable, without a round trip.
	Available bool
	// ConsecutiveFailures counts the calls that failed in a row (timeouts,
	// broken connections) since the node last answered.
	ConsecutiveFailures int64
	// Opens counts how often the node's breaker has opened since the store
	// was created.
	Opens int64
	// InFlight is how many calls to the node are waiting for their reply,
	// including those whose callers have given up.
	InFlight int
	// LastError is the last failure's message ("" if none yet).
	LastError string
	// EvictionPolicy is the node's maxmemory-policy, or "" if the node did
	// not say (CONFIG GET refused or not yet asked).
	EvictionPolicy string
	// Evicting reports an eviction policy that can delete the limiter's
	// keys whatever their expiry (allkeys-*), silently resetting limits.
	Evicting bool
}
