package main

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/statsd"
)

// statsdSettings are where the peer's statistics are pushed: its
// USE_STATSD sink (lyft/gostats' network sink).
type statsdSettings struct {
	network  string // STATSD_PROTOCOL: tcp (gostats' default) or udp
	addr     string // STATSD_HOST:STATSD_PORT
	interval time.Duration
	tags     map[string]string // EXTRA_TAGS
}

// readStatsdEnv reads the peer's statistics variables: nil when it would
// push none (USE_STATSD=false, or DISABLE_STATS=true). Its defaults are the
// peer's: on, to localhost:8125 every 10s, over TCP as lyft/gostats dials
// unless STATSD_PROTOCOL=udp.
func readStatsdEnv(e *envReader, note func(string, ...any)) *statsdSettings {
	s := &statsdSettings{
		network:  strings.ToLower(e.str("STATSD_PROTOCOL", "tcp")),
		addr:     net.JoinHostPort(e.str("STATSD_HOST", "localhost"), strconv.Itoa(e.int("STATSD_PORT", 8125))),
		interval: e.duration("STATS_FLUSH_INTERVAL", statsd.DefaultInterval),
		tags:     map[string]string{},
	}
	switch s.network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		e.fail("STATSD_PROTOCOL=%q is not tcp or udp", s.network)
	}
	if s.interval <= 0 {
		e.fail("STATS_FLUSH_INTERVAL=%q must be a positive duration (such as 10s)", e.str("STATS_FLUSH_INTERVAL", ""))
	}
	// The peer's map form (envconfig): k1:v1,k2:v2, each item exactly one
	// colon; blank means none.
	if v := e.str("EXTRA_TAGS", ""); strings.TrimSpace(v) != "" {
		for _, item := range strings.Split(v, ",") {
			parts := strings.Split(item, ":")
			if len(parts) != 2 {
				e.fail("EXTRA_TAGS=%q: item %q is not key:value (the form is k1:v1,k2:v2)", v, item)
				continue
			}
			s.tags[parts[0]] = parts[1]
		}
	}
	useStatsd, useDog, useProm := e.bool("USE_STATSD", true), e.bool("USE_DOG_STATSD", false), e.bool("USE_PROMETHEUS", false)
	if useDog {
		note("USE_DOG_STATSD: not supported (no DogStatsD tags or mogrifiers); floodgate pushes plain statsd with USE_STATSD=true, and serves the Prometheus series on /metrics")
	}
	switch {
	case e.bool("DISABLE_STATS", false):
		if useStatsd {
			note("DISABLE_STATS: no statsd push; floodgate's Prometheus series stay on /metrics")
		}
		return nil
	case !useStatsd:
		return nil
	case useProm:
		note("USE_STATSD and USE_PROMETHEUS: the peer refuses both at once; floodgate pushes statsd to %s and serves Prometheus", s.addr)
	}
	return s
}
