package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"

	"github.com/redis/rueidis"
)

// SpawnedServer is a throwaway redis-server process that belongs to one
// test: Spawn starts it on a free loopback port, and the test's cleanup kills
// it. Tests may stop (SIGSTOP), resume and kill it at will, which they must
// never do to the shared harness servers.
type SpawnedServer struct {
	// Addr is the server's 127.0.0.1:port address.
	Addr string
	// Port is the server's port; a cluster node's bus port is Port+10000.
	Port int

	path   string
	conf   string   // a config file to start from (a sentinel's), or ""
	args   []string // the extra arguments
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	log    *syncbuf.Buffer
	killed bool
}

// redisServerPath returns the redis-server binary, or skips t (fails it
// when FLOODGATE_REQUIRE_REDIS=1, as under `make test` and CI).
func redisServerPath(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		msg := fmt.Sprintf("redistest: redis-server not found (%v): `scripts/redis-harness.sh up` installs it", err)
		if os.Getenv(envRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// freePort returns a loopback port that is free, and whose cluster bus port
// (port+10000) is free too. Another process may still take it before the
// server binds it; Spawn retries then.
func freePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port pair found")
}

// Spawn starts a redis-server of its own for t on a free loopback port, with
// no persistence, plus any extra "--name value" arguments, and waits until it
// answers PING. t's cleanup kills exactly this process. It skips t if
// redis-server is not installed (and fails it when FLOODGATE_REQUIRE_REDIS=1).
func Spawn(t testing.TB, args ...string) *SpawnedServer {
	t.Helper()
	path := redisServerPath(t)
	var lastErr error
	for range 5 {
		s, err := spawn(t, path, args)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("redistest: spawning redis-server: %v", lastErr)
	return nil
}

// SpawnSentinel starts a Redis Sentinel of its own for t on a free loopback
// port, monitoring primary as master with a quorum of 1, with any extra
// config lines (such as "requirepass secret"), and waits until it answers.
// t's cleanup kills it.
func SpawnSentinel(t testing.TB, primary *SpawnedServer, master string, conf ...string) *SpawnedServer {
	t.Helper()
	path := redisServerPath(t)
	lines := append([]string{fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", master, primary.Port)}, conf...)
	file := filepath.Join(t.TempDir(), "sentinel.conf") // Sentinel rewrites it as it learns
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 5 {
		s, err := spawnFrom(t, path, file, nil)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("redistest: spawning redis-server --sentinel: %v", lastErr)
	return nil
}

func spawn(t testing.TB, path string, extra []string) (*SpawnedServer, error) {
	return spawnFrom(t, path, "", extra)
}

func spawnFrom(t testing.TB, path, conf string, extra []string) (*SpawnedServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &SpawnedServer{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, path: path, conf: conf, args: extra, log: &syncbuf.Buffer{}}
	t.Cleanup(s.Kill)
	return s, s.start(t)
}

// start runs the server process on s.Port and waits until it answers PING.
func (s *SpawnedServer) start(t testing.TB) error {
	port := s.Port
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir(), "--logfile", "",
	}
	if s.conf != "" {
		args = append([]string{s.conf, "--sentinel"}, args...)
	}
	cmd := exec.Command(s.path, append(args, s.args...)...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.killed = cmd, exited, false
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := harnessPing(s.Addr); err == nil || strings.Contains(err.Error(), "NOAUTH") {
			return nil // it answers (with --requirepass, that it wants AUTH)
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", port, strings.TrimSpace(s.log.String()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within 10s: %s", port, s.log.String())
		}
	}
}

// Stop suspends the server with SIGSTOP: it keeps its connections open but
// answers nothing, like a hung host. Resume it with Cont; cleanup kills it
// either way.
func (s *SpawnedServer) Stop(t testing.TB) {
	t.Helper()
	if err := s.process().Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", s.Addr, err)
	}
}

// Cont resumes a server suspended by Stop.
func (s *SpawnedServer) Cont(t testing.TB) {
	t.Helper()
	if err := s.process().Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %s: %v", s.Addr, err)
	}
}

func (s *SpawnedServer) process() *os.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process
}

// Kill ends the server with SIGKILL (a stopped one too) and waits until it
// has exited, so its port is free. It is safe to call more than once;
// cleanup calls it.
func (s *SpawnedServer) Kill() {
	s.mu.Lock()
	cmd, exited, killed := s.cmd, s.exited, s.killed
	s.killed = true
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if !killed {
		_ = cmd.Process.Kill()
	}
	<-exited
}

// Restart starts the server again, empty, on the same port with the same
// arguments, after Kill (or kills it first): a Redis that comes back.
func (s *SpawnedServer) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	var err error
	for range 20 { // the port may linger briefly
		if err = s.start(t); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: restarting redis-server on port %d: %v", s.Port, err)
}

// Log returns what the server printed so far.
func (s *SpawnedServer) Log() string { return s.log.String() }

// Do sends one command to the server over a fresh connection and returns
// the reply, failing t on a connection error (not on a Redis error reply,
// which is returned in the result).
func (s *SpawnedServer) Do(t testing.TB, args ...string) rueidis.RedisResult {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true, DisableRetry: true,
	})
	if err != nil {
		t.Fatalf("connecting to %s: %v", s.Addr, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

// SpawnedCluster is a throwaway Redis Cluster, each node a SpawnedServer
// of its own.
type SpawnedCluster struct {
	// Nodes are the primaries; Nodes[i] serves slots
	// i*16384/len(Nodes) to (i+1)*16384/len(Nodes)-1.
	Nodes []*SpawnedServer
	// Replicas[i], if any, replicates Nodes[i].
	Replicas []*SpawnedServer
}

// Addrs returns the primaries' addresses.
func (c *SpawnedCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// NodeForSlot returns the primary serving slot.
func (c *SpawnedCluster) NodeForSlot(slot int) *SpawnedServer {
	n := len(c.Nodes)
	for i := n - 1; i > 0; i-- {
		if slot >= i*16384/n {
			return c.Nodes[i]
		}
	}
	return c.Nodes[0]
}

// SpawnCluster starts a cluster of n primaries (no replicas) for t, assigns
// the slots evenly, and waits until every node reports cluster_state:ok and
// knows every other. t's cleanup kills exactly these processes.
func SpawnCluster(t testing.TB, n int) *SpawnedCluster {
	t.Helper()
	return spawnCluster(t, n, false)
}

// SpawnClusterWithReplicas starts a cluster of n primaries, each with one
// replica, as SpawnCluster does. Its node timeout is a minute, so no
// replica takes over while a test holds a primary stopped for seconds.
func SpawnClusterWithReplicas(t testing.TB, n int) *SpawnedCluster {
	t.Helper()
	return spawnCluster(t, n, true)
}

func spawnCluster(t testing.TB, n int, replicas bool) *SpawnedCluster {
	t.Helper()
	c := &SpawnedCluster{}
	total, timeout := n, "5000"
	if replicas {
		total, timeout = 2*n, "60000"
	}
	// A replica's first sync is diskless; Redis waits 5s by default
	// (repl-diskless-sync-delay) for more replicas to join it, and each
	// primary here has exactly one.
	var all []*SpawnedServer
	for range total {
		all = append(all, Spawn(t, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", timeout,
			"--repl-diskless-sync-delay", "0"))
	}
	c.Nodes = all[:n]
	if replicas {
		c.Replicas = all[n:]
	}
	for i, node := range c.Nodes {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := node.Do(t, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)).Error(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", node.Addr, err)
		}
	}
	for _, node := range all[1:] {
		if err := all[0].Do(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(node.Port)).Error(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", node.Addr, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	waitFor := func(node *SpawnedServer, what string, ok func() bool) {
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s: %s not reached after 30s", node.Addr, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, node := range all {
		waitFor(node, "cluster_state:ok", func() bool {
			info, err := node.Do(t, "CLUSTER", "INFO").ToString()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(total)+"\r\n")
		})
	}
	for i, replica := range c.Replicas {
		id, err := c.Nodes[i].Do(t, "CLUSTER", "MYID").ToString()
		if err != nil {
			t.Fatalf("CLUSTER MYID on %s: %v", c.Nodes[i].Addr, err)
		}
		if err := replica.Do(t, "CLUSTER", "REPLICATE", id).Error(); err != nil {
			t.Fatalf("CLUSTER REPLICATE on %s: %v", replica.Addr, err)
		}
	}
	for _, replica := range c.Replicas {
		waitFor(replica, "master_link_status:up", func() bool {
			info, err := replica.Do(t, "INFO", "replication").ToString()
			return err == nil && strings.Contains(info, "master_link_status:up")
		})
	}
	return c
}
