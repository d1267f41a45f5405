package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The environment variables that `scripts/redis-harness.sh env` prints, and
// the harness's defaults (the same as internal/redistest's, which this
// module cannot import).
const (
	EnvStandalone = "FLOODGATE_REDIS_ADDR"
	EnvCluster    = "FLOODGATE_REDIS_CLUSTER_ADDRS"
	defStandalone = "127.0.0.1:16379"
	defCluster    = "127.0.0.1:17000,127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005"
)

// Backend is one Redis deployment the contenders run against.
type Backend struct {
	// Name is "standalone" or "cluster".
	Name string
	// Addrs are the server's address, or every node of the cluster
	// (replicas included: Redis CPU is summed over all of them).
	Addrs []string
	// Cluster reports whether Addrs are Redis Cluster nodes.
	Cluster bool
}

// Backends returns the harness's standalone server and cluster, from the
// environment or the harness's default ports.
func Backends() []Backend {
	return []Backend{
		{Name: "standalone", Addrs: envAddrs(EnvStandalone, defStandalone)},
		{Name: "cluster", Addrs: envAddrs(EnvCluster, defCluster), Cluster: true},
	}
}

func envAddrs(env, def string) []string {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// GoRedis returns a go-redis client for b with go-redis's defaults (a pool
// of 10 connections per GOMAXPROCS), as the peers' users would create it.
func (b Backend) GoRedis() redis.UniversalClient {
	if b.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: b.Addrs})
	}
	return redis.NewClient(&redis.Options{Addr: b.Addrs[0]})
}

// Nodes holds one plain connection to every node of a backend, for INFO
// and MEMORY commands that must reach each node (or one key's node).
type Nodes struct {
	clients []*redis.Client
	backend Backend
}

// OpenNodes connects to every address of b and checks each answers PING.
func OpenNodes(ctx context.Context, b Backend) (*Nodes, error) {
	n := &Nodes{backend: b}
	for _, a := range b.Addrs {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: 1, DisableIdentity: true})
		n.clients = append(n.clients, c)
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("%s Redis at %s does not answer (run scripts/redis-harness.sh up): %w", b.Name, a, err)
		}
	}
	return n, nil
}

// Close closes every connection.
func (n *Nodes) Close() {
	for _, c := range n.clients {
		_ = c.Close()
	}
}

// Counters are cumulative figures of a backend, summed over its nodes.
type Counters struct {
	// CPU is used_cpu_user + used_cpu_sys (INFO cpu): the CPU time Redis
	// has spent since it started.
	CPU time.Duration
	// Commands is total_commands_processed (INFO stats).
	Commands int64
	// Scripts is the time spent running scripts: the usec of EVAL,
	// EVALSHA and their _RO forms in INFO commandstats (a script's time
	// includes the commands it calls).
	Scripts time.Duration
}

// scriptCommands are the INFO commandstats entries of script calls.
var scriptCommands = []string{"cmdstat_eval:", "cmdstat_evalsha:", "cmdstat_eval_ro:", "cmdstat_evalsha_ro:"}

// Counters reads the counters of every node and sums them.
func (n *Nodes) Counters(ctx context.Context) (Counters, error) {
	var cpu float64
	var cmds, scriptUsec int64
	for _, c := range n.clients {
		info, err := c.Info(ctx, "cpu", "stats", "commandstats").Result()
		if err != nil {
			return Counters{}, fmt.Errorf("INFO at %s: %w", c.Options().Addr, err)
		}
		scriptUsec += scriptTime(info)
		for _, field := range []string{"used_cpu_user", "used_cpu_sys", "total_commands_processed"} {
			v, ok := infoField(info, field)
			if !ok {
				return Counters{}, fmt.Errorf("INFO at %s has no %s", c.Options().Addr, field)
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return Counters{}, fmt.Errorf("INFO at %s: %s: %w", c.Options().Addr, field, err)
			}
			if field == "total_commands_processed" {
				cmds += int64(f)
			} else {
				cpu += f
			}
		}
	}
	return Counters{CPU: time.Duration(cpu * float64(time.Second)), Commands: cmds, Scripts: time.Duration(scriptUsec) * time.Microsecond}, nil
}

// scriptTime sums the usec of the script commands in an INFO commandstats
// reply, whose lines read "cmdstat_evalsha:calls=3,usec=57,...".
func scriptTime(info string) int64 {
	var total int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, prefix := range scriptCommands {
			rest, ok := strings.CutPrefix(line, prefix)
			if !ok {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					total += n
				}
			}
		}
	}
	return total
}

// Version returns the redis_version of the first node.
func (n *Nodes) Version(ctx context.Context) string {
	info, err := n.clients[0].Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	v, _ := infoField(info, "redis_version")
	return v
}

// infoField returns the value of field in an INFO reply.
func infoField(info, field string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}
