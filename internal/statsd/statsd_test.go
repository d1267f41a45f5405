package statsd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/statsd/statsdtest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

func TestAppendLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  Kind
		value uint64
		want  string
	}{
		{"ratelimit.service.rate_limit.mongo_cps.database_users.total_hits", Counter, 3, "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits:3|c\n"},
		{"ratelimit.go.heapAlloc", Gauge, 0, "ratelimit.go.heapAlloc:0|g\n"},
		{"c", Counter, 18446744073709551615, "c:18446744073709551615|c\n"},
	} {
		if got := string(AppendLine(nil, tc.name, tc.kind, tc.value)); got != tc.want {
			t.Errorf("AppendLine(%q, %d, %d) = %q, want %q", tc.name, tc.kind, tc.value, got, tc.want)
		}
	}
}

func TestTags(t *testing.T) {
	for _, tc := range []struct {
		tags map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"version": "1"}, ".__version=1"},
		{map[string]string{"zone": "eu", "app": "api"}, ".__app=api.__zone=eu"},
		{map[string]string{"v": "1.2:3|4"}, ".__v=1_2_3_4"}, // values cleaned, as lyft/gostats does
		{map[string]string{"empty": "", "": "x", "k": "v"}, ".__k=v"},
	} {
		if got := Tags(tc.tags); got != tc.want {
			t.Errorf("Tags(%v) = %q, want %q", tc.tags, got, tc.want)
		}
	}
}

// udpListener is a statsd sink whose await hands out each datagram once.
type udpListener struct {
	*statsdtest.Sink
	seen int // the datagrams await has returned
}

func listenUDP(t *testing.T) *udpListener { return &udpListener{Sink: statsdtest.Listen(t)} }

func (l *udpListener) addr() string { return "127.0.0.1:" + strconv.Itoa(l.Port()) }

// await returns the datagrams not returned before once they hold n lines
// in all, failing after a generous bound.
func (l *udpListener) await(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := l.Packets()[l.seen:]
		lines := 0
		for _, d := range got {
			lines += bytes.Count(d, []byte("\n"))
		}
		if lines >= n {
			l.seen += len(got)
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d lines, want %d: %q", lines, n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lines(ds [][]byte) []string {
	var out []string
	for _, d := range ds {
		out = append(out, strings.SplitAfter(strings.TrimSuffix(string(d), "\n"), "\n")...)
	}
	for i := range out {
		out[i] = strings.TrimSuffix(out[i], "\n")
	}
	slices.Sort(out)
	return out
}

// totals is a Source of counters the test sets.
type totals struct {
	mu sync.Mutex
	c  map[string]uint64
	g  map[string]uint64
}

func (s *totals) set(name string, v uint64) { s.mu.Lock(); s.c[name] = v; s.mu.Unlock() }

func (s *totals) source(emit func(string, Kind, uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.c {
		emit(k, Counter, v)
	}
	for k, v := range s.g {
		emit(k, Gauge, v)
	}
}

func TestFlushSendsDeltas(t *testing.T) {
	l := listenUDP(t)
	src := &totals{c: map[string]uint64{"a.total_hits": 5, "a.over_limit": 0}, g: map[string]uint64{"a.gauge": 7}}
	c, err := New(Config{Addr: l.addr(), Tags: map[string]string{"env": "test"}}, src.source)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, step := range []struct {
		set  map[string]uint64
		want []string
	}{
		// A counter at 0 is not sent; a gauge always is.
		{nil, []string{"a.gauge.__env=test:7|g", "a.total_hits.__env=test:5|c"}},
		// Gains since the previous flush only; an unchanged counter is left out.
		{map[string]uint64{"a.total_hits": 12, "a.over_limit": 2}, []string{"a.gauge.__env=test:7|g", "a.over_limit.__env=test:2|c", "a.total_hits.__env=test:7|c"}},
		{map[string]uint64{"a.over_limit": 3}, []string{"a.gauge.__env=test:7|g", "a.over_limit.__env=test:1|c"}},
		// A source that starts again from zero sends its new total.
		{map[string]uint64{"a.total_hits": 4}, []string{"a.gauge.__env=test:7|g", "a.total_hits.__env=test:4|c"}},
	} {
		for k, v := range step.set {
			src.set(k, v)
		}
		if err := c.Flush(); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
		if got := lines(l.await(t, len(step.want))); !slices.Equal(got, step.want) {
			t.Errorf("flush %d sent %q, want %q", i, got, step.want)
		}
	}
}

func TestFlushPacksDatagrams(t *testing.T) {
	l := listenUDP(t)
	src := &totals{c: map[string]uint64{}}
	const n = 200
	for i := range n {
		src.set("ratelimit.service.rate_limit.domain.key_"+strings.Repeat("x", i%40)+"_"+string(rune('a'+i%26))+"."+time.Duration(i).String(), uint64(i+1))
	}
	c, err := New(Config{Addr: l.addr()}, src.source)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	ds := l.await(t, n)
	total := 0
	for _, d := range ds {
		if len(d) > maxDatagram {
			t.Errorf("datagram of %d bytes, want at most %d", len(d), maxDatagram)
		}
		if d[len(d)-1] != '\n' {
			t.Errorf("datagram does not end with a whole line: %q", d)
		}
		total += len(d)
	}
	// Full datagrams: no more than one more than the bytes need.
	if max := total/maxDatagram + 2; len(ds) > max {
		t.Errorf("%d datagrams for %d bytes, want at most %d", len(ds), total, max)
	}
	if got := len(lines(ds)); got != n {
		t.Errorf("%d lines, want %d", got, n)
	}
}

func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 16)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			got <- sc.Text()
		}
	}()
	src := &totals{c: map[string]uint64{"x": 2}}
	c, err := New(Config{Network: "tcp", Addr: ln.Addr().String()}, src.source)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	src.set("x", 5)
	if err := c.Close(); err != nil { // sends what is pending
		t.Fatal(err)
	}
	for _, want := range []string{"x:2|c", "x:3|c"} {
		select {
		case line := <-got:
			if line != want {
				t.Errorf("line %q, want %q", line, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no line %q", want)
		}
	}
	if err := c.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
}

// TestSendErrorsKeepCounts: a flush that cannot send logs (once per
// interval), returns the error, and the next one that can sends the whole
// gain.
func TestSendErrorsKeepCounts(t *testing.T) {
	var logs syncbuf.Buffer
	src := &totals{c: map[string]uint64{"x": 3}}
	l := listenUDP(t)
	var fail atomic.Bool
	fail.Store(true)
	c, err := New(Config{Addr: l.addr(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}, src.source)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dial := c.dial
	c.dial = func(network, addr string) (net.Conn, error) {
		if fail.Load() {
			return nil, errors.New("no route to the statsd server")
		}
		return dial(network, addr)
	}
	for range 3 {
		if err := c.Flush(); err == nil {
			t.Fatal("Flush without a connection = nil, want the error")
		}
	}
	if n := strings.Count(logs.String(), "sending stats failed"); n != 1 {
		t.Errorf("3 failed flushes logged %d lines, want 1:\n%s", n, logs.String())
	}
	src.set("x", 8)
	fail.Store(false)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := lines(l.await(t, 1)); !slices.Equal(got, []string{"x:8|c"}) {
		t.Errorf("after the outage sent %q, want the whole gain x:8|c", got)
	}
}

func TestRunFlushesOnCancel(t *testing.T) {
	l := listenUDP(t)
	src := &totals{c: map[string]uint64{"x": 1}}
	c, err := New(Config{Addr: l.addr(), Interval: time.Hour}, src.source)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	cancel()
	<-done
	if got := lines(l.await(t, 1)); !slices.Equal(got, []string{"x:1|c"}) {
		t.Errorf("Run's last flush sent %q, want x:1|c", got)
	}
}

func TestRunFlushesEveryInterval(t *testing.T) {
	l := listenUDP(t)
	src := &totals{c: map[string]uint64{"x": 1}}
	c, err := New(Config{Addr: l.addr(), Interval: 20 * time.Millisecond}, src.source)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	if got := lines(l.await(t, 1)); !slices.Equal(got, []string{"x:1|c"}) {
		t.Fatalf("first flush sent %q", got)
	}
	src.set("x", 4)
	if got := lines(l.await(t, 1)); !slices.Equal(got, []string{"x:3|c"}) {
		t.Fatalf("second flush sent %q, want x:3|c", got)
	}
}

func TestNewRejects(t *testing.T) {
	for _, cfg := range []Config{
		{Addr: "localhost"},
		{Addr: "localhost:8125", Network: "unix"},
		{Addr: "localhost:8125", Interval: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

func TestRuntimeStats(t *testing.T) {
	kinds := map[string]Kind{}
	RuntimeStats("ratelimit.go")(func(name string, k Kind, _ uint64) { kinds[name] = k })
	for name, want := range map[string]Kind{"ratelimit.go.heapAlloc": Gauge, "ratelimit.go.numGoroutine": Gauge,
		"ratelimit.go.mallocs": Counter, "ratelimit.go.numGC": Counter} {
		if got, ok := kinds[name]; !ok || got != want {
			t.Errorf("%s: kind %d (present %v), want %d", name, got, ok, want)
		}
	}
	if len(kinds) != 17 {
		t.Errorf("%d runtime stats, want 17", len(kinds))
	}
}
