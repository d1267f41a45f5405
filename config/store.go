package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"

	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// Store configures the rate-limit store: the memory store, or Redis
// (redisstore.Config, whose defaults apply to the fields left out).
type Store struct {
	// Type is memory, redis, redis-cluster or redis-sentinel.
	Type string `yaml:"type"`
	// Addrs are the Redis addresses (seeds, for a cluster; sentinels, for
	// redis-sentinel).
	Addrs []string `yaml:"addrs"`
	// MasterName is the Sentinel master set (redis-sentinel only).
	MasterName string `yaml:"master_name"`
	// Username is the Redis ACL user, if any.
	Username string `yaml:"username"`
	// Password is the Redis password. Prefer PasswordEnv. Never logged.
	Password string `yaml:"password"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `yaml:"password_env"`
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (redis-sentinel only), whose credentials may differ from Redis's.
	// Prefer SentinelPasswordEnv. Never logged.
	SentinelUsername string `yaml:"sentinel_username"`
	SentinelPassword string `yaml:"sentinel_password"`
	// SentinelPasswordEnv names an environment variable holding the
	// sentinels' password.
	SentinelPasswordEnv string `yaml:"sentinel_password_env"`
	// TLS turns on TLS to Redis, with the system's roots unless TLSCAFile
	// names a CA.
	TLS bool `yaml:"tls"`
	// TLSCAFile is a PEM file of the CAs that sign Redis's certificate.
	TLSCAFile string `yaml:"tls_ca_file"`
	// TLSCertFile and TLSKeyFile are a client certificate and its key, for
	// Redis servers that require one (tls-auth-clients).
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// TLSServerName is the name Redis's certificate must hold (empty: the
	// host of each address).
	TLSServerName string `yaml:"tls_server_name"`
	// TLSSkipHostnameVerification accepts a Redis certificate that names
	// another host, as long as it chains to the trusted CAs (TLSCAFile, or
	// the system's roots): envoyproxy/ratelimit's
	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION. Prefer TLSServerName. See
	// redisstore.Config.TLSSkipHostnameVerification.
	TLSSkipHostnameVerification bool `yaml:"tls_skip_hostname_verification"`
	// MaxKeys bounds the keys of the memory store, evicting the least
	// recently decided (0 or absent: DefaultMaxKeys; memory store only).
	MaxKeys int `yaml:"max_keys"`
	// DB selects the Redis database (standalone and sentinel only).
	DB int `yaml:"db"`
	// Timeout bounds each store call, 1ms to 1m (0 or absent: the Redis
	// store's default, 50ms).
	Timeout time.Duration `yaml:"timeout"`
	// KeyPrefix starts every Redis key (empty: the Redis store's default,
	// "fg:").
	KeyPrefix string `yaml:"key_prefix"`
	// FlushDelay is how long the Redis connection may wait to gather
	// concurrent calls into one batch (0 or absent: 20µs; a negative value
	// such as -1ns turns it off; at most 1ms). See redisstore.Config.
	FlushDelay time.Duration `yaml:"flush_delay"`
	// RequireAtStart makes the store fail to open while Redis cannot be
	// reached. By default it opens anyway (redisstore.Config.LazyConnect):
	// rules answer by their failure mode until Redis is up.
	RequireAtStart bool `yaml:"require_at_start"`
	// MaxInFlight bounds the calls in flight to each Redis node (0 or
	// absent: 256; negative: no bound; at most 768). See
	// redisstore.Config.MaxInFlight.
	MaxInFlight int `yaml:"max_in_flight"`
	// BreakerFailures is how many calls to a node must fail in a row to
	// open its circuit breaker (0 or absent: 5; negative: never). See
	// redisstore.Config.BreakerFailures.
	BreakerFailures int `yaml:"breaker_failures"`
	// OverLimitCache bounds the server's over-limit cache of denials.
	OverLimitCache OverLimitCache `yaml:"over_limit_cache"`
	// PerSecond, if set, is a second Redis for the limits whose window is
	// exactly one second (envoyproxy/ratelimit's REDIS_PERSECOND): the
	// same keys as this section but for over_limit_cache, max_keys and
	// per_second, which apply to the whole store. See package splitstore.
	PerSecond *Store `yaml:"per_second"`
}

// OverLimitCache bounds the engine's cache of denials
// (decide.CacheOptions), which answers a key over its limit from memory
// until its retry delay has passed. Rules opt out with local_cache: false.
type OverLimitCache struct {
	// Disabled turns the cache off for every rule.
	Disabled bool `yaml:"disabled"`
	// MaxEntries bounds the denials held (0 or absent: 65536).
	MaxEntries int `yaml:"max_entries"`
	// MaxBytes bounds the memory held, in bytes (0 or absent: 16 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxAge is the longest a denial is answered (and a leased unit spent)
	// while the instance does not hear Redis's change channel (0 or
	// absent: 1s).
	MaxAge time.Duration `yaml:"max_age"`
}

// OverLimitCache returns the engine's cache options for the store section.
func (c *Config) OverLimitCache() decide.CacheOptions { return c.Store.OverLimitCache.options() }

func (o OverLimitCache) options() decide.CacheOptions {
	return decide.CacheOptions{Disabled: o.Disabled, MaxEntries: o.MaxEntries, MaxBytes: o.MaxBytes, MaxAge: o.MaxAge}
}

// cacheKeys are the YAML keys of decide.CacheOptions's fields.
var cacheKeys = map[string]string{"MaxEntries": "max_entries", "MaxBytes": "max_bytes", "MaxAge": "max_age"}

// Store types.
const (
	StoreMemory        = "memory"
	StoreRedis         = "redis"
	StoreRedisCluster  = "redis-cluster"
	StoreRedisSentinel = "redis-sentinel"
)

// PasswordValue returns the Redis password from Password or PasswordEnv.
func (s Store) PasswordValue() string {
	if s.PasswordEnv != "" {
		return os.Getenv(s.PasswordEnv)
	}
	return s.Password
}

// SentinelPasswordValue returns the sentinels' password from
// SentinelPassword or SentinelPasswordEnv.
func (s Store) SentinelPasswordValue() string {
	if s.SentinelPasswordEnv != "" {
		return os.Getenv(s.SentinelPasswordEnv)
	}
	return s.SentinelPassword
}

// String describes the store without secrets.
func (s Store) String() string {
	if s.Type == StoreMemory || s.Type == "" {
		return "memory (embedded, this process only)"
	}
	desc := fmt.Sprintf("%s %s", s.Type, strings.Join(s.Addrs, ","))
	if s.PerSecond != nil {
		desc += "; per-second limits: " + s.PerSecond.String()
	}
	return desc
}

// RedisConfig returns the Redis store's config for the store section,
// checked by redisstore.Config.Validate; nil for the memory store.
func (c *Config) RedisConfig() (*redisstore.Config, error) {
	return c.Store.redisConfig(c.lines, "store")
}

// RedisConfig returns the Redis store's config for s, checked by
// redisstore.Config.Validate; nil for the memory store.
func (s Store) RedisConfig() (*redisstore.Config, error) { return s.redisConfig(nil, "store") }

// PerSecondRedisConfig returns the config of the per-second Redis store
// (store.per_second), checked by redisstore.Config.Validate; nil when
// there is none.
func (s Store) PerSecondRedisConfig() (*redisstore.Config, error) {
	if s.PerSecond == nil {
		return nil, nil
	}
	return s.PerSecond.redisConfig(nil, perSecondPath)
}

// perSecondPath is the YAML path of the per-second store's section.
const perSecondPath = "store.per_second"

func (s Store) redisConfig(lines yamlfield.Lines, p string) (*redisstore.Config, error) {
	rc := &redisstore.Config{
		Addrs:      s.Addrs,
		Username:   s.Username,
		Password:   s.PasswordValue(),
		DB:         s.DB,
		KeyPrefix:  s.KeyPrefix,
		Timeout:    s.Timeout,
		FlushDelay: s.FlushDelay,

		LazyConnect:     !s.RequireAtStart,
		MaxInFlight:     s.MaxInFlight,
		BreakerFailures: s.BreakerFailures,
	}
	switch s.Type {
	case StoreMemory, "":
		return nil, nil
	case StoreRedis:
		rc.Mode = redisstore.ModeStandalone
	case StoreRedisCluster:
		rc.Mode = redisstore.ModeCluster
	case StoreRedisSentinel:
		rc.Mode = redisstore.ModeSentinel
		rc.SentinelMaster = s.MasterName
		rc.SentinelUsername, rc.SentinelPassword = s.SentinelUsername, s.SentinelPasswordValue()
	default:
		return nil, lines.Error(p+".type", s.Type, "is not one of memory, redis, redis-cluster, redis-sentinel")
	}
	if s.TLS {
		tc, err := tlsfiles.Client(s.TLSCAFile, s.TLSCertFile, s.TLSKeyFile, s.TLSServerName)
		var fe *tlsfiles.FileError
		switch {
		case errors.As(err, &fe):
			return nil, lines.Error(p+"."+fe.Key, fe.File, fe.Err.Error())
		case err != nil && s.TLSKeyFile == "":
			return nil, lines.Error(p+".tls_key_file", "", "is required with "+p+".tls_cert_file: a client certificate needs its key")
		case err != nil && s.TLSCertFile == "":
			return nil, lines.Error(p+".tls_cert_file", "", "is required with "+p+".tls_key_file: a client certificate needs its key")
		case err != nil:
			return nil, lines.Error(p+".tls", "", "cannot be set up: "+err.Error())
		}
		rc.TLS = tc
		rc.TLSSkipHostnameVerification = s.TLSSkipHostnameVerification
	}
	if err := rc.Validate(); err != nil {
		var ce *redisstore.ConfigError
		if !errors.As(err, &ce) {
			return nil, lines.Error(p, "", err.Error())
		}
		path, value := p+redisField(ce.Field), ce.Value
		if path == p+".type" {
			value = s.Type
		}
		return nil, lines.Error(path, value, ce.Reason)
	}
	return rc, nil
}

// redisField maps a redisstore.Config field to the YAML key the user wrote,
// after the section's path: ".addrs[1]", or "" for the section.
func redisField(field string) string {
	switch {
	case strings.HasPrefix(field, "Addrs"):
		return ".addrs" + strings.TrimPrefix(field, "Addrs")
	case field == "SentinelMaster":
		return ".master_name"
	case field == "DB":
		return ".db"
	case field == "KeyPrefix":
		return ".key_prefix"
	case field == "FlushDelay":
		return ".flush_delay"
	case field == "MaxInFlight":
		return ".max_in_flight"
	case field == "Timeout":
		return ".timeout"
	case field == "Mode":
		return ".type"
	case field == "TLSSkipHostnameVerification":
		return ".tls_skip_hostname_verification"
	}
	return ""
}

// Validate checks a store section built in Go as Parse checks a file's,
// its per-second store included: each error is a *FieldError naming the
// key's path under store (store.timeout, store.per_second.addrs[1]) and
// its value, without a line. Several are joined with errors.Join.
func (s Store) Validate() error { return errors.Join(s.validate(nil)...) }

// validate checks the section and the Redis configs it maps onto
// (redisstore.Config.Validate), for Validate and for Parse (with lines).
func (s *Store) validate(lines yamlfield.Lines) []error {
	errs := s.check(lines)
	if _, err := s.redisConfig(lines, "store"); err != nil {
		errs = append(errs, err)
	}
	if ps := s.PerSecond; ps != nil && ps.Type != "" && ps.Type != StoreMemory {
		if _, err := ps.redisConfig(lines, perSecondPath); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// check reports what no library checks: the store type, the timeout's
// range, and where the password comes from; and so for the per-second
// store's section.
func (s *Store) check(lines yamlfield.Lines) []error {
	errs := s.checkAt(lines, "store")
	ps := s.PerSecond
	if ps == nil {
		return errs
	}
	p := perSecondPath
	switch ps.Type {
	case StoreRedis, StoreRedisCluster, StoreRedisSentinel:
		if s.Type == "" || s.Type == StoreMemory {
			errs = append(errs, lines.Error(p, "", "needs a Redis store section: store.type is memory, which keeps every limit in this process; set store.type to redis, redis-cluster or redis-sentinel, or remove store.per_second"))
		}
	case "":
		errs = append(errs, lines.Error(p+".type", "", "is required: redis, redis-cluster or redis-sentinel"))
	default:
		errs = append(errs, lines.Error(p+".type", ps.Type, "is not one of redis, redis-cluster, redis-sentinel (the per-second store is a Redis)"))
	}
	if ps.OverLimitCache != (OverLimitCache{}) {
		errs = append(errs, lines.Error(p+".over_limit_cache", "", "applies to the whole store: set store.over_limit_cache instead"))
	}
	if ps.PerSecond != nil {
		errs = append(errs, lines.Error(p+".per_second", "", "cannot be nested: there is one per-second store"))
	}
	if ps.Type != "" && !(ps.Type == StoreRedis || ps.Type == StoreRedisCluster || ps.Type == StoreRedisSentinel) {
		return errs
	}
	return append(errs, ps.checkAt(lines, p)...)
}

// checkAt checks the section s at path p (store, store.per_second).
func (s *Store) checkAt(lines yamlfield.Lines, p string) []error {
	// An unknown type is redisConfig's error, reported once.
	if s.Type == "" || s.Type == StoreMemory {
		if errs := s.redisOnly(lines, p); len(errs) > 0 {
			return append(errs, s.checkCache(lines, p)...)
		}
	}
	errs := s.checkCache(lines, p)
	if s.Timeout != 0 && (s.Timeout < time.Millisecond || s.Timeout > time.Minute) {
		errs = append(errs, lines.Error(p+".timeout", s.Timeout.String(), "must be between 1ms and 1m (0 or absent: "+redisstore.DefaultTimeout.String()+")"))
	}
	if s.Password != "" && s.PasswordEnv != "" {
		errs = append(errs, lines.Error(p+".password_env", s.PasswordEnv, "cannot be used together with "+p+".password"))
	}
	if s.SentinelPassword != "" && s.SentinelPasswordEnv != "" {
		errs = append(errs, lines.Error(p+".sentinel_password_env", s.SentinelPasswordEnv, "cannot be used together with "+p+".sentinel_password"))
	}
	if s.Type != StoreRedisSentinel {
		for _, f := range []struct{ key, value string }{
			{p + ".master_name", s.MasterName},
			{p + ".sentinel_username", s.SentinelUsername}, {p + ".sentinel_password", s.SentinelPassword},
			{p + ".sentinel_password_env", s.SentinelPasswordEnv},
		} {
			if f.value != "" {
				errs = append(errs, lines.Error(f.key, f.value, "applies only with "+p+".type: redis-sentinel"))
			}
		}
	}
	if s.SentinelPasswordEnv != "" {
		if _, ok := os.LookupEnv(s.SentinelPasswordEnv); !ok {
			errs = append(errs, lines.Error(p+".sentinel_password_env", s.SentinelPasswordEnv, "names an environment variable that is not set; export it or remove the key"))
		}
	}
	if !s.TLS {
		for _, f := range []struct{ key, value string }{
			{p + ".tls_ca_file", s.TLSCAFile}, {p + ".tls_cert_file", s.TLSCertFile},
			{p + ".tls_key_file", s.TLSKeyFile}, {p + ".tls_server_name", s.TLSServerName},
		} {
			if f.value != "" {
				errs = append(errs, lines.Error(f.key, f.value, "applies only with "+p+".tls: true; add it"))
			}
		}
		if s.TLSSkipHostnameVerification {
			errs = append(errs, lines.Error(p+".tls_skip_hostname_verification", "true", "applies only with "+p+".tls: true; add it"))
		}
	}
	if s.MaxKeys < 0 {
		errs = append(errs, lines.Error(p+".max_keys", fmt.Sprint(s.MaxKeys), fmt.Sprintf("must be positive (0 or absent: %d)", DefaultMaxKeys)))
	} else if s.MaxKeys != 0 && s.Type != "" && s.Type != StoreMemory {
		errs = append(errs, lines.Error(p+".max_keys", fmt.Sprint(s.MaxKeys), "applies to the memory store only; Redis bounds its memory with maxmemory"))
	}
	if s.PasswordEnv != "" {
		if _, ok := os.LookupEnv(s.PasswordEnv); !ok {
			errs = append(errs, lines.Error(p+".password_env", s.PasswordEnv, "names an environment variable that is not set"))
		}
	}
	return errs
}

// checkCache reports decide.CacheOptions.Validate's errors about the
// over-limit cache's bounds, each under its YAML key: the bounds one at a
// time, so that both are reported.
func (s *Store) checkCache(lines yamlfield.Lines, p string) []error {
	o := s.OverLimitCache.options()
	var errs []error
	for _, one := range []decide.CacheOptions{{MaxEntries: o.MaxEntries}, {MaxBytes: o.MaxBytes}, {MaxAge: o.MaxAge}} {
		err := one.Validate()
		var fe *fielderr.Error
		switch {
		case err == nil:
		case errors.As(err, &fe) && cacheKeys[fe.Field] != "":
			e := lines.Error(p+".over_limit_cache."+cacheKeys[fe.Field], fe.Value, fe.Reason)
			e.Fix = fmt.Sprintf("set 0 or leave it out for the default (%d entries, %d MiB), or disabled: true to turn the cache off",
				decide.DefaultCacheEntries, decide.DefaultCacheBytes>>20)
			errs = append(errs, e)
		default:
			errs = append(errs, lines.Error(p+".over_limit_cache", "", err.Error()))
		}
	}
	return errs
}

// redisOnly reports each key of the memory store's section s (at path p)
// that only a Redis store reads: left there, it would be ignored, and
// replicas meant to share one Redis would each count alone.
func (s *Store) redisOnly(lines yamlfield.Lines, p string) []error {
	why := p + ".type is memory"
	if _, written := lines[p+".type"]; !written && lines != nil {
		why = p + ".type is left out, so the store is memory"
	}
	why += ", which keeps every limit in this process (each replica counting alone)"
	var errs []error
	for _, f := range []struct {
		key, value string
		set        bool
	}{
		{"addrs", strings.Join(s.Addrs, ", "), len(s.Addrs) > 0},
		{"master_name", s.MasterName, s.MasterName != ""},
		{"username", s.Username, s.Username != ""},
		{"password", "", s.Password != ""}, // never shown
		{"password_env", s.PasswordEnv, s.PasswordEnv != ""},
		{"sentinel_username", s.SentinelUsername, s.SentinelUsername != ""},
		{"sentinel_password", "", s.SentinelPassword != ""},
		{"sentinel_password_env", s.SentinelPasswordEnv, s.SentinelPasswordEnv != ""},
		{"tls", "true", s.TLS},
		{"tls_ca_file", s.TLSCAFile, s.TLSCAFile != ""},
		{"tls_cert_file", s.TLSCertFile, s.TLSCertFile != ""},
		{"tls_key_file", s.TLSKeyFile, s.TLSKeyFile != ""},
		{"tls_server_name", s.TLSServerName, s.TLSServerName != ""},
		{"tls_skip_hostname_verification", "true", s.TLSSkipHostnameVerification},
		{"db", fmt.Sprint(s.DB), s.DB != 0},
		{"timeout", s.Timeout.String(), s.Timeout != 0},
		{"key_prefix", fmt.Sprintf("%q", s.KeyPrefix), s.KeyPrefix != ""},
		{"flush_delay", s.FlushDelay.String(), s.FlushDelay != 0},
		{"require_at_start", "true", s.RequireAtStart},
		{"max_in_flight", fmt.Sprint(s.MaxInFlight), s.MaxInFlight != 0},
		{"breaker_failures", fmt.Sprint(s.BreakerFailures), s.BreakerFailures != 0},
	} {
		if f.set {
			e := lines.Error(p+"."+f.key, f.value, "applies to a Redis store only, and "+why)
			e.Fix = "set " + p + ".type: redis (or redis-cluster, redis-sentinel) to share the limits through Redis, or remove the key"
			errs = append(errs, e)
		}
	}
	return errs
}
