// Command rlsbench measures floodgate's Envoy rate-limit service against
// envoyproxy/ratelimit (at the version compat/envoyratelimit pins): both
// built here, started as processes with the same environment of a peer
// deployment (floodgate as its drop-in, serve --envoy-env), on one Redis
// server spawned for the run (each keeps its own keys) and the same rule
// file, loaded in turns (rounds rotate which goes first) by the same
// closed-loop gRPC client. It prints, per service, decisions per second,
// p50/p99 latency as the client sees it, and the CPU time (user + system,
// from /proc) per decision of the server process, of the client (this
// process) and of Redis.
//
// A closed loop on one machine measures the machine: the client and Redis
// spend CPU on the same cores as the server, so a cheaper server gains
// decisions/s only as far as they let it. -server-cpus runs every round
// once per CPU cap listed: 0 uncapped, a number of cores as a cgroup CPU
// quota on each server (as a pod's CPU limit), which makes the server the
// bottleneck, so that its decisions/s are its own capacity at that CPU.
// -deadline sends every call with a gRPC deadline, as Envoy does.
//
// -services picks the services (the peer, this tree's floodgate, or both);
// -base REV adds floodgate built at a git revision, interleaved with the
// others, so that two floodgates are compared in one run; -profile DIR
// writes each floodgate's CPU and allocation profiles over one more load.
//
//	go run ./cmd/rlsbench [-rounds 3] [-duration 10s] [-concurrency 64] [-keys 10000]
//	    [-services peer,floodgate] [-base main] [-profile DIR] [-server-cpus 0,0.5] [-deadline 20ms]
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

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
	rounds := flag.Int("rounds", 3, "rounds; each loads every service once, rotating which goes first")
	duration := flag.Duration("duration", 10*time.Second, "load time per service per round")
	concurrency := flag.Int("concurrency", 64, "calls in flight")
	keys := flag.Int("keys", 10000, "distinct descriptor values")
	services := flag.String("services", "peer,floodgate", "the services to load, comma-separated: peer (envoyproxy/ratelimit), floodgate (this tree's)")
	base := flag.String("base", "", "also load floodgate built at this git `revision` (such as main), interleaved with the others, to compare two floodgates in one run")
	profile := flag.String("profile", "", "after the rounds, load each floodgate that can serve profiles once more (not counted) and write its CPU profile "+
		"and allocation profile over that load into this `folder` (cpu-NAME.pprof, allocs-NAME.pprof)")
	serverCPUs := flag.String("server-cpus", "0", "comma-separated CPU caps, in `cores`, each server is loaded under in every round: 0 leaves it uncapped, sharing "+
		"this machine's cores with the client and Redis; a number caps it with a cgroup CPU quota, as a pod's CPU limit (needs root), so that its decisions/s "+
		"measure the server's capacity rather than this machine's")
	deadline := flag.Duration("deadline", 0, "send every call with this gRPC `deadline`, as Envoy does (its filter's timeout, 20ms by default); 0 sends none")
	env := flag.String("env", "", "extra environment of this tree's floodgate only, comma-separated `VAR=VALUE` pairs (such as GOGC=200), to measure a setting against -base")
	flag.Parse()
	cfg := config{rounds: *rounds, duration: *duration, concurrency: *concurrency, keys: *keys, base: *base, profile: *profile, deadline: *deadline}
	for _, c := range strings.Split(*serverCPUs, ",") {
		cores, err := strconv.ParseFloat(strings.TrimSpace(c), 64)
		if err != nil || cores < 0 || (cores > 0 && cores < 0.1) {
			fmt.Fprintf(os.Stderr, "rlsbench: -server-cpus: %q is not 0 or a number of cores of at least 0.1\n", c)
			os.Exit(2)
		}
		cfg.serverCPUs = append(cfg.serverCPUs, cores)
	}
	if cfg.deadline < 0 {
		fmt.Fprintln(os.Stderr, "rlsbench: -deadline cannot be negative")
		os.Exit(2)
	}
	if *env != "" {
		for _, kv := range strings.Split(*env, ",") {
			if !strings.Contains(kv, "=") {
				fmt.Fprintf(os.Stderr, "rlsbench: -env: %q is not VAR=VALUE\n", kv)
				os.Exit(2)
			}
			cfg.env = append(cfg.env, kv)
		}
	}
	for _, s := range strings.Split(*services, ",") {
		switch s = strings.TrimSpace(s); s {
		case "peer":
			cfg.peer = true
		case "floodgate":
			cfg.floodgate = true
		default:
			fmt.Fprintf(os.Stderr, "rlsbench: -services: %q is not peer or floodgate\n", s)
			os.Exit(2)
		}
	}
	if !cfg.peer && !cfg.floodgate && cfg.base == "" {
		fmt.Fprintln(os.Stderr, "rlsbench: nothing to load: -services is empty and there is no -base")
		os.Exit(2)
	}
	cfg.requests = requests(cfg.keys)
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

// config is what the flags ask for.
type config struct {
	rounds, concurrency, keys int
	duration                  time.Duration
	serverCPUs                []float64                 // the CPU caps in cores to load each server under (0: none)
	deadline                  time.Duration             // each call's deadline (0: none)
	peer, floodgate           bool                      // load the peer, this tree's floodgate
	base                      string                    // a git revision of floodgate to load too
	profile                   string                    // a folder for profiles
	env                       []string                  // this tree's floodgate's extra environment
	requests                  []*rlsv3.RateLimitRequest // one per key
}

// result is one load of one service.
type result struct {
	decisions   int64
	errors      int64
	elapsed     time.Duration
	cpu         time.Duration // the server's
	clientCPU   time.Duration // this process's: the load client
	redisCPU    time.Duration // the Redis server's
	syscalls    int64         // the server's read and write system calls
	periods     int64         // the CPU quota's periods the server was runnable in
	throttled   int64         // how many of them ended with the server out of quota
	p50, p99    time.Duration
	overLimited int64
}

// service is one server process under test.
type service struct {
	name   string
	file   string // a name for its profile files
	peer   bool
	env    []string // extra environment
	client rlsv3.RateLimitServiceClient
	pid    int
	pprof  string     // the address of its Go profiles, if it serves them
	cap    *cpuCap    // its cgroup, if any mode caps its CPU
	res    [][]result // per mode (cfg.serverCPUs), per round
}

func run(cfg config) error {
	dir, err := os.MkdirTemp("", "rlsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, version, err := envoyratelimit.PeerSource()
	if err != nil {
		return err
	}
	type build struct {
		svc *service
		bin string
	}
	var builds []build
	if cfg.peer {
		bin := filepath.Join(dir, "ratelimit")
		if err := envoyratelimit.Build(bin, true); err != nil {
			return err
		}
		builds = append(builds, build{&service{name: "envoyproxy/ratelimit " + version, file: "peer", peer: true}, bin})
	}
	if cfg.floodgate {
		bin := filepath.Join(dir, "floodgate")
		if err := envoyratelimit.Build(bin, false); err != nil {
			return err
		}
		name := "floodgate"
		if len(cfg.env) > 0 {
			name += " " + strings.Join(cfg.env, " ")
		}
		builds = append(builds, build{&service{name: name, file: "floodgate", env: cfg.env}, bin})
	}
	if cfg.base != "" {
		bin := filepath.Join(dir, "floodgate-base")
		if err := buildAt(bin, cfg.base, dir); err != nil {
			return err
		}
		builds = append(builds, build{&service{name: "floodgate@" + cfg.base, file: "floodgate-base"}, bin})
	}
	redisAddr, redisPID, stopRedis, err := spawnRedis(dir)
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
	var svcs []*service
	for _, b := range builds {
		s := b.svc
		p, err := envoyratelimit.FreePorts()
		if err != nil {
			return err
		}
		var args []string
		if !s.peer {
			args = []string{"serve", "--envoy-env"}
			if cfg.profile != "" && servesProfiles(b.bin) {
				s.pprof = "127.0.0.1:" + strconv.Itoa(p.Debug)
				args = append(args, "--pprof-listen", s.pprof)
			}
		}
		name, argv := b.bin, args
		if slices.Max(cfg.serverCPUs) > 0 {
			cg, err := newCPUCap(fmt.Sprintf("rlsbench-%d-%s", os.Getpid(), s.file))
			if err != nil {
				return err
			}
			defer cg.remove() // runs after the kill below
			name, argv = cg.wrap(b.bin, args)
			s.cap = cg
		}
		cmd := exec.Command(name, argv...)
		// One store timeout for both (the peer's default is 10s, floodgate's
		// 50ms): a loaded machine must not turn floodgate's calls into
		// outages the peer would have waited out.
		cmd.Env = append(append(envoyratelimit.Env(root, redisAddr, p), "LOG_LEVEL=error", "REDIS_TIMEOUT=1s"), s.env...)
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		conn, err := envoyratelimit.WaitServing("127.0.0.1:"+strconv.Itoa(p.GRPC), time.Minute)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer conn.Close()
		s.client, s.pid = rlsv3.NewRateLimitServiceClient(conn), cmd.Process.Pid
		svcs = append(svcs, s)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("rlsbench: %d rounds x %s per service, %d calls in flight, %d keys; Redis %s; load average at start: %s",
		cfg.rounds, cfg.duration, cfg.concurrency, cfg.keys, redisAddr, load)
	for _, s := range svcs {
		s.res = make([][]result, len(cfg.serverCPUs))
	}
	for r := range cfg.rounds {
		// Round r starts with service r mod n: each goes first in turn.
		order := append(slices.Clone(svcs[r%len(svcs):]), svcs[:r%len(svcs)]...)
		for m, cores := range cfg.serverCPUs {
			for _, s := range order {
				if s.cap != nil {
					if err := s.cap.set(cores); err != nil {
						return err
					}
				}
				warm(s, cfg)
				res, err := loadOnce(s, cfg, procs{server: s.pid, redis: redisPID}, cfg.duration)
				if err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
				s.res[m] = append(s.res[m], res)
				per := func(d time.Duration) time.Duration {
					return (d / time.Duration(max(res.decisions, 1))).Round(100 * time.Nanosecond)
				}
				throttled := ""
				if cores > 0 {
					throttled = fmt.Sprintf("  out of quota in %.0f%% of periods", 100*float64(res.throttled)/float64(max(res.periods, 1)))
				}
				fmt.Printf("round %d %-9s %-42s %8.0f decisions/s  p50 %-8s p99 %-8s CPU/decision %-8s (client %s, Redis %s)  syscalls/decision %.2f  errors %d%s\n",
					r+1, capName(cores), s.name, float64(res.decisions)/res.elapsed.Seconds(), res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond),
					per(res.cpu), per(res.clientCPU), per(res.redisCPU), float64(res.syscalls)/float64(max(res.decisions, 1)), res.errors, throttled)
			}
		}
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at end: %s\n", load)
	for m, cores := range cfg.serverCPUs {
		summarize(svcs, m, cores)
	}
	if cfg.profile != "" {
		for _, s := range svcs {
			if s.cap != nil {
				if err := s.cap.set(0); err != nil {
					return err
				}
			}
		}
		return profileAll(cfg, svcs)
	}
	return nil
}

// capName names a CPU cap in the output.
func capName(cores float64) string {
	if cores == 0 {
		return "uncapped"
	}
	return strconv.FormatFloat(cores, 'g', -1, 64) + " cores"
}

// summarize prints the table of mode m (the servers capped at cores) and
// each floodgate against the peer and this tree's against the base.
func summarize(svcs []*service, m int, cores float64) {
	if cores > 0 {
		fmt.Printf("\neach server capped at %g cores (a cgroup CPU quota, %d µs period):\n", cores, cpuPeriod)
	} else {
		fmt.Println("\nthe servers uncapped, sharing the machine's cores with the client and Redis:")
	}
	fmt.Println("| service | decisions/s (median, range) | p50 | p99 | server CPU per decision | client, Redis CPU per decision | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	med := map[*service][2]float64{}
	for _, s := range svcs {
		var rate, cpu, client, redis []float64
		var p50, p99 []time.Duration
		var errs int64
		for _, r := range s.res[m] {
			errs += r.errors
			rate = append(rate, float64(r.decisions)/r.elapsed.Seconds())
			cpu = append(cpu, float64(r.cpu)/float64(max(r.decisions, 1)))
			client = append(client, float64(r.clientCPU)/float64(max(r.decisions, 1)))
			redis = append(redis, float64(r.redisCPU)/float64(max(r.decisions, 1)))
			p50, p99 = append(p50, r.p50), append(p99, r.p99)
		}
		x := [2]float64{median(rate), median(cpu)}
		med[s] = x
		fmt.Printf("| %s | %.1fk (%.1f–%.1fk) | %s | %s | %.1f µs | %.1f, %.1f µs | %d |\n", s.name, x[0]/1000, slices.Min(rate)/1000, slices.Max(rate)/1000,
			medianD(p50).Round(time.Microsecond), medianD(p99).Round(time.Microsecond), x[1]/1000, median(client)/1000, median(redis)/1000, errs)
	}
	// Each floodgate against the peer, and this tree's against the base.
	for _, a := range svcs {
		for _, b := range svcs {
			if a.peer || a == b || !(b.peer || (a.file == "floodgate" && b.file == "floodgate-base")) {
				continue
			}
			x, y := med[a], med[b]
			fmt.Printf("%s / %s: %.2fx decisions/s at %.2fx the server CPU per decision\n", a.name, b.name, x[0]/y[0], x[1]/y[1])
		}
	}
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

// spawnRedis starts a redis-server of the run's own on a free loopback
// port, without persistence, and returns its address, process id and a
// stop function.
func spawnRedis(dir string) (string, int, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("redis-server: %w", err)
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
			return "", 0, nil, fmt.Errorf("redis-server on %s never answered", addr)
		}
		time.Sleep(25 * time.Millisecond)
	}
	return addr, cmd.Process.Pid, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}
