package connlimit_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/connlimit"
)

func serve(t *testing.T, n int) (*connlimit.Listener, string) {
	t.Helper()
	return serveWith(t, n, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
}

func serveWith(t *testing.T, n int, h http.HandlerFunc) (*connlimit.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, n)
	srv := &http.Server{
		Handler:   h,
		ConnState: l.ConnState, ReadHeaderTimeout: time.Minute,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l, ln.Addr().String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestIdleConnectionsMakeRoom(t *testing.T) {
	const capN = 20
	l, addr := serve(t, capN)
	var idle []net.Conn
	for range 3 * capN { // silent connections, as a flood opens them
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	waitFor(t, "the flood to be accepted", func() bool { return l.Evicted() >= 2*capN })
	if open := l.Open(); open > capN {
		t.Fatalf("%d connections open, over the cap of %d", open, capN)
	}
	// A real request still gets through, taking an idle one's place.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("request %d under the flood: %v", i, err)
		}
		resp.Body.Close()
	}
	if open := l.Open(); open > capN {
		t.Fatalf("%d connections open, over the cap of %d", open, capN)
	}
}

func TestBusyConnectionsAreKept(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	l, addr := serveWith(t, 2, func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	// Two connections whose requests are being handled: active, so never
	// evicted; a third is refused at once.
	var busy []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
		<-entered
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection over the cap was served")
	}
	waitFor(t, "the refusal to be counted", func() bool { return l.Rejected() == 1 })
	close(release)
	for i, b := range busy {
		_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 12)
		if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "HTTP/1.1 200" {
			t.Fatalf("busy connection %d: %q %v", i, buf, err)
		}
	}
	if l.Evicted() != 0 {
		t.Fatalf("%d busy connections evicted", l.Evicted())
	}
}

func TestWithoutConnStateNothingIsEvicted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for range 2 {
		c := <-accepted
		defer c.Close()
	}
	// The third is closed at once; the first two, which a server without
	// ConnState (gRPC) may be using, are kept.
	_ = conns[2].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conns[2].Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection over the cap was not closed")
	}
	waitFor(t, "the refusal", func() bool { return l.Rejected() == 1 })
	if l.Evicted() != 0 || l.Open() != 2 {
		t.Fatalf("evicted %d, open %d; want 0 and 2", l.Evicted(), l.Open())
	}
}

// serveBodies serves h wrapped in Bodies on a listener capped at n.
func serveBodies(t *testing.T, n int, h http.HandlerFunc) (*connlimit.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, n)
	srv := &http.Server{
		Handler:   connlimit.Bodies(h),
		ConnState: l.ConnState, ConnContext: l.ConnContext,
		ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l, ln.Addr().String()
}

// stalled opens a connection that sends a request's headers, announcing a
// body it never sends.
func stalled(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStalledBodies(t *testing.T) {
	readBody := func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
	refuse := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"handler waits for the body", readBody},
		{"handler answers without reading it", refuse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const capN, flood = 10, 50
			var entered atomic.Int64
			l, addr := serveBodies(t, capN, func(w http.ResponseWriter, r *http.Request) {
				entered.Add(1)
				tc.handler(w, r)
			})
			// Every stalled request reaches its handler: none finds the
			// places taken by the ones before it. Each is sent once the
			// one before is in its handler: a connection that has not yet
			// sent its request is idle too, and a flood of them at once
			// evicts one another before their requests are read.
			for i := range flood {
				stalled(t, addr)
				waitFor(t, "the stalled request to be served", func() bool { return entered.Load() >= int64(i+1) })
			}
			if l.Rejected() != 0 {
				t.Fatalf("%d connections refused at the cap: stalled bodies held their places", l.Rejected())
			}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := range 5 {
				resp, err := client.Post("http://"+addr+"/", "text/plain", strings.NewReader("hello"))
				if err != nil {
					t.Fatalf("request %d under the stalled bodies: %v", i, err)
				}
				resp.Body.Close()
			}
			if open := l.Open(); open > capN {
				t.Fatalf("%d connections open, over the cap of %d", open, capN)
			}
		})
	}
}

func TestUnreadBodyClosesTheConnection(t *testing.T) {
	_, addr := serveBodies(t, 10, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	c := stalled(t, addr)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := io.ReadAll(c) // the answer, then EOF long before ReadTimeout
	if err != nil {
		t.Fatalf("the connection was not closed after the answer: %v (read %q)", err, resp)
	}
	if !strings.HasPrefix(string(resp), "HTTP/1.1 401") || !strings.Contains(string(resp), "Connection: close") {
		t.Fatalf("answer %q", resp)
	}
}

func TestReadBodyKeepsTheConnection(t *testing.T) {
	_, addr := serveBodies(t, 10, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	var local string
	for i := range 3 {
		req, _ := http.NewRequest("POST", "http://"+addr+"/", strings.NewReader("hello"))
		var got string
		req = req.WithContext(httptraceConn(req.Context(), &got))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i > 0 && got != local {
			t.Fatalf("request %d on a new connection %s, want %s kept alive", i, got, local)
		}
		local = got
	}
}

// httptraceConn records in *addr the local address of the connection a
// request goes out on.
func httptraceConn(ctx context.Context, addr *string) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { *addr = i.Conn.LocalAddr().String() }})
}

func TestTrackCalls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, 2)
	l.TrackCalls()
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil
	}
	busy, idle := dial(), dial()
	srvBusy, srvIdle := <-accepted, <-accepted
	defer srvBusy.Close()
	defer srvIdle.Close()
	l.Begin(srvBusy.RemoteAddr()) // a call in progress on the first
	// A third connection evicts the idle one, not the busy one.
	third := dial()
	srv3 := <-accepted
	defer srv3.Close()
	if !closed(idle) {
		t.Fatal("the idle connection was not evicted")
	}
	// The busy one's call ends: it is idle again, and the next to go.
	l.Begin(srv3.RemoteAddr())
	l.End(srvBusy.RemoteAddr())
	fourth := dial()
	srv4 := <-accepted
	defer srv4.Close()
	if !closed(busy) {
		t.Fatal("the connection whose call ended was not evicted")
	}
	_ = third.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := third.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("the connection with a call in progress was closed: %v", err)
	}
	_ = fourth
	if l.Evicted() != 2 || l.Rejected() != 0 || l.Open() != 2 {
		t.Fatalf("evicted %d, rejected %d, open %d; want 2, 0, 2", l.Evicted(), l.Rejected(), l.Open())
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
