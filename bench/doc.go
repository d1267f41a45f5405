// Package bench compares floodgate with the libraries its users would pick
// instead, on the same machine, the same Redis and in the same run. It is a
// module of its own so peer libraries never enter floodgate's dependencies.
//
// On Redis: floodgate's token bucket and sliding-window log (through
// rueidis) against github.com/go-redis/redis_rate/v10 (GCRA),
// github.com/ulule/limiter/v3 (fixed window) and
// github.com/throttled/throttled/v2 (GCRA with compare-and-swap), the peers
// through go-redis v9; 10,000 random keys (mostly admitted) and one hot key
// (mostly denied), 1 to 256 callers, standalone and Redis Cluster. In
// process: floodgate's memory store against golang.org/x/time/rate (one
// limiter per key), github.com/sethvargo/go-limiter's memorystore and
// ulule/limiter's memory store.
//
// The driver, cmd/peerbench, runs the contenders in interleaved rounds and
// writes the tables and charts of docs/PERFORMANCE.md; `make bench` runs it
// with the Redis harness up. BenchmarkMemory runs the in-process comparison
// under go test:
//
//	go test -run '^$' -bench Memory -benchmem
package bench
