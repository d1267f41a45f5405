package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
)

// benchTarget is what the callers load: decide answers one request.
type benchTarget struct {
	// desc and limit describe it in the summary.
	desc, limit string
	decide      func(ctx context.Context, key string) (allowed bool, err error)
	close       func()
}

// open connects to the target o names.
func (o *benchOptions) open(ctx context.Context) (*benchTarget, error) {
	switch o.target {
	case "http":
		return o.openHTTP(ctx)
	case "grpc":
		return o.openGRPC()
	}
	return o.openStore(ctx)
}

func (o *benchOptions) openStore(ctx context.Context) (*benchTarget, error) {
	cfg, err := loadConfig(o.cfgPath)
	if err != nil {
		return nil, err
	}
	if o.cfgPath == "" {
		// The built-in example runs on memory; without --config only
		// --store chooses.
		cfg.Store = config.Store{Type: config.StoreMemory}
	}
	if o.store != "" {
		sc := cfg.Store
		sc.Type = o.store
		switch o.store {
		case config.StoreMemory:
		case config.StoreRedis:
			sc.Addrs = []string{o.redisAddr}
		case config.StoreRedisCluster:
			sc.Addrs = simSplitList(o.redisAddrs)
		case config.StoreRedisSentinel:
			sc.Addrs, sc.MasterName = simSplitList(o.sentinels), o.master
		default:
			return nil, fmt.Errorf("--store %q is not memory, redis, redis-cluster or redis-sentinel", o.store)
		}
		cfg.Store = sc
	}
	if o.rule != "" {
		return o.openRule(cfg)
	}
	alg, err := floodgate.ParseAlgorithm(o.algorithm)
	if err != nil {
		return nil, err
	}
	limit := floodgate.NewLimit(alg, o.limit, o.window)
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	if err := limitcheck.Cost(limit, o.cost); err != nil {
		return nil, err
	}
	store, closeStore, err := openStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	// No rule: the store's own AllowN, with no engine (no over-limit cache,
	// no failure mode), which the summary says.
	prefix, cost := o.keyPrefix, o.cost
	return &benchTarget{
		desc:  "store " + cfg.Store.String() + ", raw AllowN (no engine)",
		limit: limit.String(),
		decide: func(ctx context.Context, key string) (bool, error) {
			d, err := store.AllowN(ctx, prefix+key, limit, cost)
			return d.Allowed, err
		},
		close: closeStore,
	}, nil
}

// openRule loads cfg's rule o.rule, decided as floodgate serve decides it:
// through an engine built as serve builds it (its over-limit cache, the
// store's batch, the rule's failure mode and shadow), with the server's
// check of the rule (server.Rule.Check), so it reads and writes the keys
// serve does. A request is allowed as POST /v1/check would answer 200; one
// the server would answer 503 or 500 is an error.
func (o *benchOptions) openRule(cfg *config.Config) (*benchTarget, error) {
	rule, err := configRule(cfg, o.rule)
	if err != nil {
		return nil, err
	}
	if err := limitcheck.Cost(rule.Limit, o.cost); err != nil {
		return nil, err
	}
	store, closeStore, err := openStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	engine, err := newEngine(store, cfg)
	if err != nil {
		closeStore()
		return nil, err
	}
	prefix, cost := o.keyPrefix, o.cost
	return &benchTarget{
		desc:  "store " + cfg.Store.String() + " rule " + rule.Name + " (engine, as serve decides)",
		limit: rule.Limit.String(),
		decide: func(ctx context.Context, key string) (bool, error) {
			resp, err := decideRule(ctx, engine, rule, prefix+key, cost)
			return resp.Allowed, err
		},
		close: closeStore,
	}, nil
}

func (o *benchOptions) openHTTP(ctx context.Context) (*benchTarget, error) {
	base := strings.TrimRight(o.url, "/")
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        o.concurrency,
		MaxIdleConnsPerHost: o.concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
	// Ask the server for its rules: to default to the first, and to say
	// what the rule is.
	rule, limit := o.rule, ""
	rules, err := fetchRules(ctx, client, base, o.timeout)
	switch {
	case err != nil && rule == "":
		return nil, fmt.Errorf("--target http without --rule: %w", err)
	case err == nil && len(rules) == 0:
		return nil, fmt.Errorf("%s/v1/rules lists no rules", base)
	case err == nil:
		if rule == "" {
			rule = rules[0].Name
		}
		found := false
		for _, r := range rules {
			if r.Name == rule {
				limit, found = r.Description, true
			}
		}
		if !found {
			return nil, fmt.Errorf("the server at %s has no rule %q", base, rule)
		}
	}
	endpoint := base + "/v1/check"
	ruleJSON, _ := json.Marshal(rule)
	prefix, cost := o.keyPrefix, o.cost
	return &benchTarget{
		desc:  "http " + endpoint + " rule " + rule,
		limit: limit,
		decide: func(ctx context.Context, key string) (bool, error) {
			body := make([]byte, 0, 64+len(prefix)+len(key))
			body = append(body, `{"rule":`...)
			body = append(body, ruleJSON...)
			body = append(body, `,"key":`...)
			body = strconv.AppendQuote(body, prefix+key)
			body = append(body, `,"cost":`...)
			body = strconv.AppendInt(body, cost, 10)
			body = append(body, '}')
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
			if err != nil {
				return false, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				_, err = io.Copy(io.Discard, resp.Body)
				return true, err
			case http.StatusTooManyRequests:
				_, err = io.Copy(io.Discard, resp.Body)
				return false, err
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
			return false, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		},
		close: client.CloseIdleConnections,
	}, nil
}

// fetchRules reads GET /v1/rules.
func fetchRules(ctx context.Context, client *http.Client, base string, timeout time.Duration) ([]struct{ Name, Description string }, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot list the server's rules: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/v1/rules: HTTP %d", base, resp.StatusCode)
	}
	var out struct {
		Rules []struct{ Name, Description string } `json:"rules"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET %s/v1/rules: %w", base, err)
	}
	return out.Rules, nil
}

func (o *benchOptions) openGRPC() (*benchTarget, error) {
	conn, err := grpc.NewClient(o.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("grpc: %w", err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	domain, descKey, prefix, cost := o.domain, o.descriptor, o.keyPrefix, uint32(o.cost)
	return &benchTarget{
		desc: fmt.Sprintf("grpc %s domain %s descriptor %s", o.grpcAddr, domain, descKey),
		decide: func(ctx context.Context, key string) (bool, error) {
			resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
				Domain:      domain,
				HitsAddend:  cost,
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: descKey, Value: prefix + key}}}},
			})
			if err != nil {
				return false, err
			}
			switch resp.GetOverallCode() {
			case rlsv3.RateLimitResponse_OK:
				return true, nil
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				return false, nil
			}
			return false, fmt.Errorf("overall_code %s", resp.GetOverallCode())
		},
		close: func() { _ = conn.Close() },
	}, nil
}
