package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/simulate"
)

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", "simulate [--limit N] [--window D] [--duration D] [--seed S] [--pattern P,...] [--algorithm A,...] [--format table|json] [--plot DIR] [--store memory|redis|redis-cluster|redis-sentinel]", stderr)
	limit := fs.Int64("limit", simulate.DefaultLimit, "`N`: requests admitted per window (the token bucket's capacity)")
	window := fs.Duration("window", simulate.DefaultWindow, "the limit's `window`")
	duration := fs.Duration("duration", simulate.DefaultDuration, "simulated `time` per pattern (at least two windows)")
	seed := fs.Uint64("seed", 1, "`seed` for the random patterns: the same seed gives the same report")
	patterns := fs.String("pattern", "all", "comma-separated `patterns`: all, or of "+strings.Join(simulate.PatternNames(), ", "))
	algorithms := fs.String("algorithm", "all", "comma-separated `algorithms`: all, or of "+strings.Join(algorithmlist.Names(), ", "))
	format := fs.String("format", "table", "output `format`: table or json")
	plotDir := fs.String("plot", "", "write the figures (PNG and SVG) to `dir`")
	store := fs.String("store", "memory", "`store` to run through: memory, redis, redis-cluster or redis-sentinel")
	redisAddr := fs.String("redis-addr", "127.0.0.1:16379", "standalone Redis `host:port` (--store redis)")
	redisAddrs := fs.String("redis-addrs", "127.0.0.1:17000,127.0.0.1:17001,127.0.0.1:17002", "comma-separated cluster `nodes` (--store redis-cluster)")
	sentinelAddrs := fs.String("sentinel-addrs", "127.0.0.1:26380", "comma-separated `sentinels` (--store redis-sentinel)")
	sentinelMaster := fs.String("sentinel-master", "floodgate", "the `name` of the primary the sentinels monitor (--store redis-sentinel)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Zero means "the default" in simulate.Config; on the command line it is
	// a mistake.
	switch {
	case *limit < 1:
		return simUsageError(stderr, fs.Usage, fmt.Errorf("--limit %d must be at least 1", *limit))
	case *window <= 0:
		return simUsageError(stderr, fs.Usage, fmt.Errorf("--window %s must be positive", *window))
	case *duration <= 0:
		return simUsageError(stderr, fs.Usage, fmt.Errorf("--duration %s must be positive", *duration))
	}
	cfg := simulate.Config{Limit: *limit, Window: *window, Duration: *duration, Seed: *seed}
	var err error
	if cfg.Patterns, err = simulate.LookupPatterns(simSplitList(*patterns)...); err != nil {
		return simUsageError(stderr, fs.Usage, err)
	}
	if cfg.Algorithms, err = simParseAlgorithms(*algorithms); err != nil {
		return simUsageError(stderr, fs.Usage, err)
	}
	if *format != "table" && *format != "json" {
		return simUsageError(stderr, fs.Usage, fmt.Errorf("--format %q is not table or json", *format))
	}
	if err := cfg.Validate(); err != nil {
		return simUsageError(stderr, fs.Usage, err)
	}
	var backend *simulate.Backend
	switch *store {
	case "memory":
		backend = simulate.NewMemoryBackend()
	case "redis":
		backend, err = simulate.NewRedisBackend(ctx, simulate.RedisOptions{Addrs: []string{*redisAddr}})
	case "redis-cluster":
		backend, err = simulate.NewRedisBackend(ctx, simulate.RedisOptions{Addrs: simSplitList(*redisAddrs), Cluster: true})
	case "redis-sentinel":
		backend, err = simulate.NewRedisBackend(ctx, simulate.RedisOptions{Addrs: simSplitList(*sentinelAddrs), SentinelMaster: *sentinelMaster})
	default:
		return simUsageError(stderr, fs.Usage, fmt.Errorf("--store %q is not memory, redis, redis-cluster or redis-sentinel", *store))
	}
	if err != nil {
		return err
	}
	defer backend.Close()
	rep, err := simulate.Run(ctx, cfg, backend)
	if err != nil {
		return err
	}
	if *plotDir != "" {
		files, err := rep.Plot(*plotDir)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintln(stderr, "wrote", f)
		}
	}
	if *format == "json" {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteTable(stdout)
}

// simUsageError prints err and the usage, and returns errUsage.
func simUsageError(stderr io.Writer, usage func(), err error) error {
	fmt.Fprintf(stderr, "floodgate simulate: %v\n", err)
	usage()
	return errUsage
}

// simSplitList splits a comma-separated list, dropping blanks.
func simSplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// simParseAlgorithms parses "all" or a comma-separated list of algorithm names.
func simParseAlgorithms(s string) ([]floodgate.Algorithm, error) {
	names := simSplitList(s)
	if len(names) == 0 || len(names) == 1 && names[0] == "all" {
		return algorithmlist.All(), nil
	}
	var out []floodgate.Algorithm
	for _, n := range names {
		a, err := floodgate.ParseAlgorithm(n)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
