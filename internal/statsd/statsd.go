// Package statsd pushes statistics to a statsd server as
// envoyproxy/ratelimit does through its statsd library (lyft/gostats): at
// each flush a counter is sent as what it gained since the previous flush
// ("name:delta|c", only when not zero) and a gauge as its value
// ("name:value|g"), one line each, with tags appended to the name in that
// library's form (name.__key=value, keys sorted). Over UDP the lines go in
// datagrams of at most 1432 bytes (no fragmentation on a 1500-byte MTU);
// over TCP as one stream.
//
// The statistics are not kept here: a Source reports its own totals at
// each flush, so nothing is counted twice. Send errors are logged (at most
// one line per interval) and never reach the caller's hot path: flushes run
// on their own goroutine ([Client.Run]).
package statsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/internal/logthrottle"
)

// Kind is a statistic's type.
type Kind uint8

const (
	// Counter is a total that only grows; the client sends its gain since
	// the previous flush.
	Counter Kind = iota
	// Gauge is a value sent as it is at each flush.
	Gauge
)

// A Source reports statistics at each flush through emit: each counter's
// total since the source began, each gauge's current value. Names are
// full statsd names without tags. A Source is called from the flushing
// goroutine only, one flush at a time.
type Source func(emit func(name string, kind Kind, value uint64))

// DefaultInterval is envoyproxy/ratelimit's STATS_FLUSH_INTERVAL.
const DefaultInterval = 10 * time.Second

// maxDatagram is the UDP payload size lyft/gostats fills: 1432 bytes fit a
// 1500-byte MTU with IP and UDP headers.
const maxDatagram = 1432

// Timeouts of the connection, as lyft/gostats sets them.
const (
	dialTimeout  = 1500 * time.Millisecond
	writeTimeout = time.Second
)

// Config configures a Client. The zero value is not usable: Addr is
// required.
type Config struct {
	// Network is "udp" (also "udp4", "udp6") or "tcp" ("tcp4", "tcp6").
	// Default: udp.
	Network string
	// Addr is the statsd server's host:port.
	Addr string
	// Interval is the time between two flushes of Run. Default:
	// DefaultInterval.
	Interval time.Duration
	// Tags are appended to every name (name.__key=value, keys sorted;
	// '.', ':' and '|' in values become '_'; empty keys or values are
	// left out).
	Tags map[string]string
	// Logger receives send errors, at most one line per Interval (or per
	// 10s, if shorter). Default: discarded.
	Logger *slog.Logger
}

// Client flushes its sources to a statsd server. It is safe for concurrent
// use; flushes are serialised.
type Client struct {
	network, addr string
	interval      time.Duration
	suffix        string // the serialised tags
	sources       []Source
	warn          *logthrottle.Logger
	dial          func(network, addr string) (net.Conn, error)

	mu     sync.Mutex
	conn   net.Conn
	sent   map[string]uint64 // each counter's total at its last send
	closed bool
}

// ErrClosed is returned by Flush after Close.
var ErrClosed = errors.New("statsd: client closed")

// New returns a client of cfg's server flushing sources. It does not
// connect: each flush dials if it has no connection, so a statsd server
// that starts later is found then.
func New(cfg Config, sources ...Source) (*Client, error) {
	network := cfg.Network
	switch network {
	case "":
		network = "udp"
	case "udp", "udp4", "udp6", "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("statsd: network %q is not udp or tcp", cfg.Network)
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("statsd: address %q is not host:port: %w", cfg.Addr, err)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("statsd: interval %s is negative", cfg.Interval)
	}
	interval := cfg.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		network: network, addr: cfg.Addr, interval: interval, suffix: Tags(cfg.Tags), sources: sources,
		warn: logthrottle.New(logger, max(interval, 10*time.Second), nil),
		dial: func(network, addr string) (net.Conn, error) { return net.DialTimeout(network, addr, dialTimeout) },
		sent: map[string]uint64{},
	}, nil
}

// Tags serialises tags as lyft/gostats appends them to a name:
// ".__key=value" for each, sorted by key, with '.', ':' and '|' in values
// replaced by '_'; pairs with an empty key or value are left out.
func Tags(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(".__")
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.Map(func(r rune) rune {
			if r == '.' || r == ':' || r == '|' {
				return '_'
			}
			return r
		}, tags[k]))
	}
	return b.String()
}

// AppendLine appends one statsd line, "name:value|c\n" or
// "name:value|g\n", to b.
func AppendLine(b []byte, name string, kind Kind, value uint64) []byte {
	b = append(b, name...)
	b = append(b, ':')
	b = strconv.AppendUint(b, value, 10)
	if kind == Gauge {
		return append(b, "|g\n"...)
	}
	return append(b, "|c\n"...)
}

// Run flushes every interval until ctx ends, then flushes once more and
// closes the client.
func (c *Client) Run(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = c.Close()
			return
		case <-t.C:
			_ = c.Flush()
		}
	}
}

// pending is one line of a flush: for a counter, the total it commits
// once sent.
type pending struct {
	name  string // the counter's name, "" for a gauge
	total uint64
	end   int // the line's end in the flush's buffer
}

// Flush sends what the sources report: the counters that gained since
// their last send, and every gauge. A counter's gain counts as sent once
// the datagram (or, over TCP, the write) that carries it was written
// without error; otherwise it is sent again at the next flush. The error,
// also logged, is the first of the flush.
func (c *Client) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return c.flush()
}

func (c *Client) flush() error {
	var buf []byte
	var lines []pending
	for _, src := range c.sources {
		src(func(name string, kind Kind, value uint64) {
			full := name + c.suffix
			switch kind {
			case Gauge:
				buf = AppendLine(buf, full, Gauge, value)
				lines = append(lines, pending{end: len(buf)})
			default:
				last := c.sent[full]
				if value < last {
					last = 0 // the source started again
				}
				if value == last {
					return
				}
				buf = AppendLine(buf, full, Counter, value-last)
				lines = append(lines, pending{name: full, total: value, end: len(buf)})
			}
		})
	}
	if len(lines) == 0 {
		return nil
	}
	limit := len(buf) // TCP: one write
	if strings.HasPrefix(c.network, "udp") {
		limit = maxDatagram
	}
	var first error
	start := 0
	for i := 0; i < len(lines); {
		// The lines of one packet: as many as fit (at least one).
		j := i + 1
		for j < len(lines) && lines[j].end-start <= limit {
			j++
		}
		end := lines[j-1].end
		if err := c.write(buf[start:end]); err != nil {
			if first == nil {
				first = err
			}
		} else {
			for _, l := range lines[i:j] {
				if l.name != "" {
					c.sent[l.name] = l.total
				}
			}
		}
		i, start = j, end
	}
	if first != nil {
		c.warn.Warn(context.Background(), "statsd: sending stats failed", slog.String("addr", c.addr),
			slog.String("network", c.network), slog.Any("err", first))
	}
	return first
}

// write sends one packet, dialling first if there is no connection; after
// an error the connection is closed, to be dialled again next time.
func (c *Client) write(p []byte) error {
	if c.conn == nil {
		conn, err := c.dial(c.network, c.addr)
		if err != nil {
			return fmt.Errorf("statsd: %w", err)
		}
		c.conn = conn
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.conn.Write(p); err != nil {
		_ = c.conn.Close()
		c.conn = nil
		return fmt.Errorf("statsd: %w", err)
	}
	return nil
}

// Close flushes what is pending and closes the connection. Later flushes
// return ErrClosed; Close is safe to call more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.flush()
	if c.conn != nil {
		if cerr := c.conn.Close(); err == nil {
			err = cerr
		}
		c.conn = nil
	}
	return err
}
