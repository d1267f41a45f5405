// Package statsdtest is a statsd server on a real UDP socket, for tests: it
// keeps every datagram it receives and reads each line as a statsd server
// does (counters summed, the last value of each gauge).
package statsdtest

import (
	"bytes"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Sink is a statsd server on 127.0.0.1. It is safe for concurrent use.
type Sink struct {
	conn     *net.UDPConn
	mu       sync.Mutex
	packets  [][]byte
	counters map[string]uint64 // name → the sum of its |c lines
	gauges   map[string]uint64 // name → its last |g line
	types    map[string]string // every name received → its type (c, g, ms)
	bad      []string          // lines not in statsd form
}

// Listen starts a Sink on a free loopback port; it stops when tb's test
// ends.
func Listen(tb testing.TB) *Sink {
	tb.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	s := &Sink{conn: conn, counters: map[string]uint64{}, gauges: map[string]uint64{}, types: map[string]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 65536)
		for {
			n, err := conn.Read(b)
			if err != nil {
				return
			}
			s.receive(bytes.Clone(b[:n]))
		}
	}()
	tb.Cleanup(func() { conn.Close(); <-done })
	return s
}

// receive records one datagram and reads its lines.
func (s *Sink) receive(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.packets = append(s.packets, p)
	for _, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		name, rest, ok1 := strings.Cut(line, ":")
		v, typ, ok2 := strings.Cut(rest, "|")
		if !ok1 || !ok2 || name == "" {
			s.bad = append(s.bad, line)
			continue
		}
		switch typ {
		case "c", "g":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				s.bad = append(s.bad, line)
				continue
			}
			if typ == "c" {
				s.counters[name] += n
			} else {
				s.gauges[name] = n
			}
		case "ms":
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				s.bad = append(s.bad, line)
				continue
			}
		default:
			s.bad = append(s.bad, line)
			continue
		}
		s.types[name] = typ
	}
}

// Port is the sink's UDP port.
func (s *Sink) Port() int { return s.conn.LocalAddr().(*net.UDPAddr).Port }

// Packets returns the datagrams received so far, in order.
func (s *Sink) Packets() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.packets)
}

// Counters returns each counter's total so far, by name.
func (s *Sink) Counters() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counters)
}

// Gauges returns each gauge's last value, by name.
func (s *Sink) Gauges() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.gauges)
}

// Types returns the type (c, g or ms) of every name received, by name.
func (s *Sink) Types() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.types)
}

// Bad returns the lines received that are not in statsd form.
func (s *Sink) Bad() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bad)
}
