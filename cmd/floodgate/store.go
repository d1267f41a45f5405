package main

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// openStore opens the store a config names and returns it with its closer.
func openStore(_ context.Context, c config.Store) (floodgate.Store, func(), error) {
	if c.Type == config.StoreMemory {
		return memory.New(), func() {}, nil
	}
	rc, err := redisConfig(c)
	if err != nil {
		return nil, nil, err
	}
	s, err := redisstore.New(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("store (%s): %w", c.String(), err)
	}
	return s, s.Close, nil
}

// redisConfig maps the YAML store section to the Redis store's config.
func redisConfig(c config.Store) (redisstore.Config, error) {
	rc := redisstore.Config{
		Addrs:      c.Addrs,
		Username:   c.Username,
		Password:   c.PasswordValue(),
		DB:         c.DB,
		KeyPrefix:  c.KeyPrefix,
		Timeout:    c.Timeout,
		FlushDelay: c.FlushDelay,
	}
	if c.TLS {
		rc.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch c.Type {
	case config.StoreRedis:
		rc.Mode = redisstore.ModeStandalone
	case config.StoreRedisCluster:
		rc.Mode = redisstore.ModeCluster
	case config.StoreRedisSentinel:
		rc.Mode = redisstore.ModeSentinel
		rc.SentinelMaster = c.MasterName
	default:
		return rc, fmt.Errorf("store.type %q is not memory, redis, redis-cluster or redis-sentinel", c.Type)
	}
	return rc, nil
}
