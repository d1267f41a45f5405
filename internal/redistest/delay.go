package redistest

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// DelayProxy listens on a free loopback port and forwards every connection
// to addr, holding each chunk of bytes for oneWay in both directions, so a
// client of the returned address sees a round trip about 2*oneWay longer
// than loopback's (measure it: a loaded machine adds its own delays).
// Chunks keep their order and pipelines stay pipelined, so it models
// distance, not a slower server. The last two milliseconds of each wait
// spin, as timers are coarser, so the proxy takes CPU. It stops with the
// test.
func DelayProxy(tb testing.TB, addr string, oneWay time.Duration) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: delay proxy: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", addr)
			if err != nil {
				client.Close()
				continue
			}
			track(client)
			track(server)
			wg.Go(func() { delayCopy(server, client, oneWay) })
			wg.Go(func() { delayCopy(client, server, oneWay) })
		}
	})
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// delayCopy copies src to dst, each chunk delivered oneWay after it was
// read. It closes dst when src ends.
func delayCopy(dst, src net.Conn, oneWay time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range queue {
			// Timers here may not fire sooner than about a millisecond,
			// so the last stretch is a polite spin.
			if wait := time.Until(c.due); wait > 2*time.Millisecond {
				time.Sleep(wait - 2*time.Millisecond)
			}
			for time.Now().Before(c.due) {
				runtime.Gosched()
			}
			if _, err := dst.Write(c.data); err != nil {
				for range queue { // drain, so the reader never blocks
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{time.Now().Add(oneWay), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(queue)
	<-done
	dst.Close()
}
