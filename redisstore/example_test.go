package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// A store on a single Redis server, deciding a limit of 100 requests per
// minute per client address.
func ExampleNew() {
	store, err := redisstore.New(redisstore.Config{
		Addrs:   []string{"127.0.0.1:6379"},
		Timeout: 50 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	d, err := store.Allow(context.Background(), "203.0.113.7", floodgate.PerMinute(100))
	switch {
	case errors.Is(err, floodgate.ErrStoreUnavailable):
		// Redis is down or slow: fail open (admit) or closed (deny), as the
		// rule says.
	case err != nil:
		log.Fatal(err) // a bad limit, or a bug
	case !d.Allowed:
		fmt.Printf("429: retry in %s\n", d.RetryAfter)
	}
}

// A store on a Redis Cluster: any of its nodes will do, the client discovers
// the rest. Every key of one identity lands in the same slot.
func ExampleNew_cluster() {
	store, err := redisstore.New(redisstore.Config{
		Addrs:     []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		Mode:      redisstore.ModeCluster,
		KeyPrefix: "api:",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}

// A store that follows the primary "mymaster" through Redis Sentinel.
func ExampleNew_sentinel() {
	store, err := redisstore.New(redisstore.Config{
		Addrs:          []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		SentinelMaster: "mymaster",
		Password:       "secret",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}

// Config errors name the field and the value.
func ExampleConfig_Validate() {
	cfg := redisstore.Config{Addrs: []string{"127.0.0.1:6379"}, KeyPrefix: "{app}:"}
	fmt.Println(cfg.Validate())
	// Output:
	// redisstore: invalid config: KeyPrefix "{app}:" must not contain '{' or '}' (they would break the Redis Cluster hash tags)
}

// The keys of one identity share a hash tag; braces in identities are
// escaped.
func ExampleKey() {
	fmt.Println(redisstore.Key("api:", "203.0.113.7", floodgate.SlidingWindowLog))
	fmt.Println(redisstore.Key("api:", "50%{off}", floodgate.TokenBucket))
	// Identities that share a hash tag share a slot.
	fmt.Println(redisstore.Key("api:", "{user42}/login", floodgate.TokenBucket))
	fmt.Println(redisstore.Key("api:", "{user42}/upload", floodgate.FixedWindow))
	// Output:
	// api:{=203.0.113.7}:swl
	// api:{@=off}=50%25%7Boff%7D:tb
	// api:{@=user42}=%7Buser42%7D/login:tb
	// api:{@=user42}=%7Buser42%7D/upload:fw
}

// The embedded scripts, for other languages (see docs/LUA.md).
func ExampleScripts() {
	all := redisstore.Scripts()
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		// The first line is the shebang, "#!lua", then comes the contract.
		_, src, _ := strings.Cut(all[name], "\n")
		first, _, _ := strings.Cut(src, "\n")
		fmt.Printf("%-28s %s\n", name, first)
	}
	// Output:
	// batch.lua                    -- floodgate batch (https://github.com/floodgate-rl/floodgate)
	// fixed_window.lua             -- floodgate fixed window (https://github.com/floodgate-rl/floodgate)
	// sliding_window_counter.lua   -- floodgate sliding-window counter (https://github.com/floodgate-rl/floodgate)
	// sliding_window_log.lua       -- floodgate sliding-window log (https://github.com/floodgate-rl/floodgate)
	// token_bucket.lua             -- floodgate token bucket (https://github.com/floodgate-rl/floodgate)
}
