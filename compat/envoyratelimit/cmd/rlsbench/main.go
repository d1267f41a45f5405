// Command rlsbench measures floodgate's Envoy rate-limit service against
// envoyproxy/ratelimit (at the version compat/envoyratelimit pins): both
// built here, started as processes with the same environment of a peer
// deployment (floodgate as its drop-in, serve --envoy-env), on one Redis
// server spawned for the run (each keeps its own keys) and the same rule
// file, loaded in turns (rounds alternate the two) by the same closed-loop
// gRPC client. It prints, per service, decisions per second, p50/p99
// latency as the client sees it, and the server process's CPU time (user +
// system, from /proc) per decision.
//
//	go run ./cmd/rlsbench [-rounds 3] [-duration 10s] [-concurrency 64] [-keys 10000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/compat/envoyratelimit"
)

// rules is the benchmark's rule file: one rule far above the load, so every
// call is a full decision that admits.
const rules = `domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 1000000
`

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each loads the peer and floodgate once, alternating which goes first")
	duration := flag.Duration("duration", 10*time.Second, "load time per service per round")
	concurrency := flag.Int("concurrency", 64, "calls in flight")
	keys := flag.Int("keys", 10000, "distinct descriptor values")
	flag.Parse()
	if err := run(*rounds, *duration, *concurrency, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

// result is one load of one service.
type result struct {
	decisions   int64
	errors      int64
	elapsed     time.Duration
	cpu         time.Duration
	p50, p99    time.Duration
	overLimited int64
}

func run(rounds int, duration time.Duration, concurrency, keys int) error {
	dir, err := os.MkdirTemp("", "rlsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, version, err := envoyratelimit.PeerSource()
	if err != nil {
		return err
	}
	peerBin, fgBin := filepath.Join(dir, "ratelimit"), filepath.Join(dir, "floodgate")
	for _, b := range []struct {
		out  string
		peer bool
	}{{peerBin, true}, {fgBin, false}} {
		if err := envoyratelimit.Build(b.out, b.peer); err != nil {
			return err
		}
	}
	redisAddr, stopRedis, err := spawnRedis(dir)
	if err != nil {
		return err
	}
	defer stopRedis()
	root := filepath.Join(dir, "runtime")
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(rules), 0o644); err != nil {
		return err
	}
	type svc struct {
		name   string
		client rlsv3.RateLimitServiceClient
		pid    int
		res    []result
	}
	var svcs []*svc
	for _, s := range []struct {
		name string
		bin  string
		args []string
	}{{"envoyproxy/ratelimit " + version, peerBin, nil}, {"floodgate", fgBin, []string{"serve", "--envoy-env"}}} {
		p, err := envoyratelimit.FreePorts()
		if err != nil {
			return err
		}
		cmd := exec.Command(s.bin, s.args...)
		// One store timeout for both (the peer's default is 10s, floodgate's
		// 50ms): a loaded machine must not turn floodgate's calls into
		// outages the peer would have waited out.
		cmd.Env = append(envoyratelimit.Env(root, redisAddr, p), "LOG_LEVEL=error", "REDIS_TIMEOUT=1s")
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		conn, err := envoyratelimit.WaitServing("127.0.0.1:"+strconv.Itoa(p.GRPC), time.Minute)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer conn.Close()
		svcs = append(svcs, &svc{name: s.name, client: rlsv3.NewRateLimitServiceClient(conn), pid: cmd.Process.Pid})
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("rlsbench: %d rounds x %s per service, %d calls in flight, %d keys; Redis %s; load average at start: %s",
		rounds, duration, concurrency, keys, redisAddr, load)
	for r := range rounds {
		order := svcs
		if r%2 == 1 {
			order = []*svc{svcs[1], svcs[0]}
		}
		for _, s := range order {
			warm(s.client, concurrency, keys)
			res, err := loadOnce(s.client, s.pid, duration, concurrency, keys)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.res = append(s.res, res)
			fmt.Printf("round %d %-42s %8.0f decisions/s  p50 %-8s p99 %-8s CPU/decision %-8s errors %d\n", r+1, s.name,
				float64(res.decisions)/res.elapsed.Seconds(), res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond),
				(res.cpu / time.Duration(max(res.decisions, 1))).Round(100*time.Nanosecond), res.errors)
		}
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at end: %s\n", load)
	fmt.Println("| service | decisions/s (median, range) | p50 | p99 | server CPU per decision | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	med := map[string][2]float64{}
	for _, s := range svcs {
		var rate, cpu []float64
		var p50, p99 []time.Duration
		var errs int64
		for _, r := range s.res {
			errs += r.errors
			rate = append(rate, float64(r.decisions)/r.elapsed.Seconds())
			cpu = append(cpu, float64(r.cpu)/float64(max(r.decisions, 1)))
			p50, p99 = append(p50, r.p50), append(p99, r.p99)
		}
		m := [2]float64{median(rate), median(cpu)}
		med[s.name] = m
		fmt.Printf("| %s | %.1fk (%.1f–%.1fk) | %s | %s | %.1f µs | %d |\n", s.name, m[0]/1000, slices.Min(rate)/1000, slices.Max(rate)/1000,
			medianD(p50).Round(time.Microsecond), medianD(p99).Round(time.Microsecond), m[1]/1000, errs)
	}
	p, f := med[svcs[0].name], med[svcs[1].name]
	fmt.Printf("floodgate / peer: %.2fx decisions/s at %.2fx the server CPU per decision\n", f[0]/p[0], f[1]/p[1])
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[len(s)/2]
}

func medianD(v []time.Duration) time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// request is one call for key.
func request(key int) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c" + strconv.Itoa(key)}},
	}}}
}

// warm sends a second of calls, so connections and caches are warm.
func warm(c rlsv3.RateLimitServiceClient, concurrency, keys int) {
	_, _ = loadOnce(c, 0, time.Second, concurrency, keys)
}

// loadOnce keeps concurrency calls in flight for d and measures them, with
// the CPU time the process pid spent meanwhile (none for pid 0).
func loadOnce(c rlsv3.RateLimitServiceClient, pid int, d time.Duration, concurrency, keys int) (result, error) {
	var (
		res     result
		mu      sync.Mutex
		lats    []time.Duration
		wg      sync.WaitGroup
		errs    atomic.Int64
		over    atomic.Int64
		lastErr atomic.Value
	)
	cpu0, err := procCPU(pid)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			var mine []time.Duration
			for ctx.Err() == nil {
				t := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), request(rng.IntN(keys)))
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
	cpu1, err := procCPU(pid)
	if err != nil {
		return res, err
	}
	res.cpu = cpu1 - cpu0
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

// spawnRedis starts a redis-server of the run's own on a free loopback
// port, without persistence, and returns its address and a stop function.
func spawnRedis(dir string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("redis-server: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			_ = cmd.Process.Kill()
			return "", nil, fmt.Errorf("redis-server on %s never answered", addr)
		}
		time.Sleep(25 * time.Millisecond)
	}
	return addr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}
