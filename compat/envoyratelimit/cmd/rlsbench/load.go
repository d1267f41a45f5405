package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// requests returns one call per key, built once: the client's own cost per
// call is then gRPC's alone (messages are safe to marshal concurrently).
func requests(keys int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c" + strconv.Itoa(i)}},
		}}}
	}
	return reqs
}

// warm sends a second of calls, so connections and caches are warm.
func warm(s *service, cfg config) {
	_, _ = loadOnce(s, cfg, procs{}, time.Second)
}

// procs are the processes whose CPU time a load measures: the server under
// test and Redis (0: not measured). The client's, this process's, is
// measured with the server's.
type procs struct{ server, redis int }

// cpu returns the CPU times of the server, this process and Redis.
func (p procs) cpu() (server, client, redis time.Duration, err error) {
	if p.server == 0 {
		return 0, 0, 0, nil
	}
	if server, err = procCPU(p.server); err != nil {
		return
	}
	if client, err = procCPU(os.Getpid()); err != nil {
		return
	}
	redis, err = procCPU(p.redis)
	return
}

// loadOnce keeps concurrency calls in flight for d and measures them, with
// the CPU time the processes p spent meanwhile.
func loadOnce(s *service, cfg config, p procs, d time.Duration) (result, error) {
	var (
		res     result
		mu      sync.Mutex
		lats    []time.Duration
		wg      sync.WaitGroup
		errs    atomic.Int64
		over    atomic.Int64
		lastErr atomic.Value
	)
	cpu0, client0, redis0, err := p.cpu()
	if err != nil {
		return res, err
	}
	sys0 := procSyscalls(p.server)
	var per0, thr0 int64
	if s.cap != nil {
		per0, thr0 = s.cap.periods()
	}
	reqs := cfg.requests
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	for w := range cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			var mine []time.Duration
			for ctx.Err() == nil {
				t := time.Now()
				call, cancel := context.Background(), context.CancelFunc(func() {})
				if cfg.deadline > 0 {
					call, cancel = context.WithTimeout(call, cfg.deadline)
				}
				resp, err := s.client.ShouldRateLimit(call, reqs[rng.IntN(len(reqs))])
				cancel()
				if err != nil {
					errs.Add(1)
					lastErr.Store(err)
					continue
				}
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					over.Add(1)
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	cpu1, client1, redis1, err := p.cpu()
	if err != nil {
		return res, err
	}
	res.cpu, res.clientCPU, res.redisCPU = cpu1-cpu0, client1-client0, redis1-redis0
	res.syscalls = procSyscalls(p.server) - sys0
	if s.cap != nil {
		per1, thr1 := s.cap.periods()
		res.periods, res.throttled = per1-per0, thr1-thr0
	}
	res.decisions, res.errors, res.overLimited = int64(len(lats)), errs.Load(), over.Load()
	if len(lats) == 0 {
		err, _ := lastErr.Load().(error)
		return res, fmt.Errorf("no call succeeded: %v", err)
	}
	slices.Sort(lats)
	res.p50, res.p99 = lats[len(lats)/2], lats[len(lats)*99/100]
	if res.overLimited > 0 {
		return res, fmt.Errorf("%d calls over the limit: the rule should admit everything", res.overLimited)
	}
	return res, nil
}

// procCPU returns the user + system CPU time of process pid (0: none).
func procCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat")
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz, nil
}

// procSyscalls returns the read and write system calls process pid has
// made (syscr + syscw of /proc/PID/io; 0 for pid 0 or when unreadable).
func procSyscalls(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && (k == "syscr" || k == "syscw") {
			c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += c
		}
	}
	return n
}
