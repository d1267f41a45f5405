package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// readStore reads the peer's Redis variables into a store section: the
// main Redis (REDIS_*), the per-second one when REDIS_PERSECOND is true
// (REDIS_PERSECOND_*), and what both share (the TLS files, the key
// prefix).
func readStore(e *envReader) config.Store {
	if b := strings.ToLower(e.str("BACKEND_TYPE", "redis")); b != "redis" {
		e.fail("BACKEND_TYPE=%q is not supported: floodgate's shared store is Redis (standalone, Sentinel or Cluster)", b)
	}
	perSecond := e.bool("REDIS_PERSECOND", false)
	tf := readRedisTLSFiles(e)
	store := redisFromEnv(e, "REDIS_", "/var/run/nutcracker/ratelimit.sock", tf)
	store.KeyPrefix = e.str("CACHE_KEY_PREFIX", "")
	if perSecond {
		ps := redisFromEnv(e, "REDIS_PERSECOND_", "/var/run/nutcracker/ratelimitpersecond.sock", tf)
		ps.KeyPrefix = store.KeyPrefix
		store.PerSecond = &ps
	} else {
		for _, v := range []string{"REDIS_PERSECOND_URL", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_PIPELINE_WINDOW"} {
			if e.set(v) {
				e.note("%s: ignored, as by the peer, because REDIS_PERSECOND is not true", v)
			}
		}
	}
	if e.set("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION") {
		e.note("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: not needed (health always asks the store, each Redis)")
	}
	if e.set("EXPIRATION_JITTER_MAX_SECONDS") {
		e.note("EXPIRATION_JITTER_MAX_SECONDS: not needed (floodgate's keys expire when their window ends)")
	}
	if e.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false) {
		e.note("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: always so in floodgate: a request over the limit counts nowhere")
	}
	return store
}

// redisTLSFiles are the peer's TLS settings for its Redis, shared by the
// main and the per-second one (REDIS_TLS_*).
type redisTLSFiles struct {
	cert, key, ca string
	skipHostname  bool
}

// readRedisTLSFiles reads the TLS files, which the peer reads, for both of
// its Redis, when either has TLS; otherwise it notes them as ignored.
func readRedisTLSFiles(e *envReader) redisTLSFiles {
	var tf redisTLSFiles
	if !e.bool("REDIS_TLS", false) && !e.bool("REDIS_PERSECOND_TLS", false) {
		for _, v := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"} {
			if e.str(v, "") != "" {
				e.note("%s: ignored, as by the peer, because neither REDIS_TLS nor REDIS_PERSECOND_TLS is true", v)
			}
		}
		return tf
	}
	tf = redisTLSFiles{cert: e.str("REDIS_TLS_CLIENT_CERT", ""), key: e.str("REDIS_TLS_CLIENT_KEY", ""), ca: e.str("REDIS_TLS_CACERT", ""),
		skipHostname: e.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)}
	if (tf.cert == "") != (tf.key == "") {
		e.fail("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together: set both for a client certificate, or neither")
	}
	return tf
}

// redisFromEnv reads one of the peer's Redis settings, those of the
// variables starting with prefix (REDIS_, or REDIS_PERSECOND_ for the
// per-second Redis), into a store section; defURL is the peer's default
// address.
func redisFromEnv(e *envReader, prefix, defURL string, tf redisTLSFiles) config.Store {
	v := func(name string) string { return prefix + name }
	store, creds, sentinelCreds := redisAddrs(e, prefix, defURL)
	redisAuth(e, prefix, &store, creds, sentinelCreds)
	store.TLS = e.bool(v("TLS"), false)
	if store.TLS {
		store.TLSCertFile, store.TLSKeyFile, store.TLSCAFile = tf.cert, tf.key, tf.ca
		store.TLSSkipHostnameVerification = tf.skipHostname
	}
	store.Timeout = redisTimeout(e, v("TIMEOUT"))
	if w := e.duration(v("PIPELINE_WINDOW"), 0); w > 0 {
		store.FlushDelay = min(w, time.Millisecond)
		if w > time.Millisecond {
			e.note("%s=%s: floodgate gathers calls for at most 1ms", v("PIPELINE_WINDOW"), w)
		}
	}
	for _, name := range []string{v("POOL_SIZE"), v("PIPELINE_LIMIT"), v("POOL_ON_EMPTY_BEHAVIOR")} {
		if e.set(name) {
			e.note("%s: not needed (floodgate multiplexes every call on one pipelined connection per node)", name)
		}
	}
	return store
}

// redisAddrs reads the Redis's type, socket type and URL: the section's
// type, addresses and master name, and the credentials the redis:// URLs
// carry (those of the sentinels' URLs apart).
func redisAddrs(e *envReader, prefix, defURL string) (store config.Store, creds, sentinelCreds redisURLCreds) {
	v := func(name string) string { return prefix + name }
	url := e.str(v("URL"), defURL)
	socketType := strings.ToLower(e.str(v("SOCKET_TYPE"), "unix"))
	switch t := strings.ToLower(e.str(v("TYPE"), "single")); t {
	case "single":
		store.Type = config.StoreRedis
		switch socketType {
		case "tcp":
			// redisstore checks the address; a path is a unix socket
			// there, but not with the peer's tcp.
			if strings.HasPrefix(url, "/") {
				e.fail("%s=%q: with %s=tcp it is host:port, such as redis:6379; for a unix socket set %s=unix", v("URL"), url, v("SOCKET_TYPE"), v("SOCKET_TYPE"))
			}
			store.Addrs, creds = parseRedisAddrs(e, v("URL"), url, []string{url})
		case "unix":
			// The peer's default: a socket, often a twemproxy sidecar's,
			// which cannot run floodgate's scripts (docs/ENVOY.md).
			if !strings.HasPrefix(url, "/") {
				e.fail("%s=%q: with %s=unix (the peer's default) it is the absolute path of Redis's unix socket; for host:port set %s=tcp", v("URL"), maskRedisURL(url), v("SOCKET_TYPE"), v("SOCKET_TYPE"))
			}
			store.Addrs = []string{url}
		default:
			e.fail("%s=%q is not unix or tcp", v("SOCKET_TYPE"), socketType)
		}
	case "cluster", "sentinel":
		// The peer dials the nodes of a cluster and the sentinels over TCP,
		// whatever the socket type.
		if e.set(v("SOCKET_TYPE")) && socketType != "tcp" {
			e.note("%s=%s: ignored, as by the peer, with %s=%s (its nodes are reached over TCP)", v("SOCKET_TYPE"), socketType, v("TYPE"), t)
		}
		parts := strings.Split(url, ",")
		if t == "cluster" {
			store.Type = config.StoreRedisCluster
			store.Addrs, creds = parseRedisAddrs(e, v("URL"), url, parts)
		} else if len(parts) < 2 || strings.TrimSpace(parts[0]) == "" || strings.Contains(parts[0], "://") {
			e.fail("%s=%q: with %s=sentinel it is <master name>,<sentinel1>,...", v("URL"), maskRedisURL(url), v("TYPE"))
		} else {
			// The URLs are the sentinels': for the peer their credentials
			// authenticate to the sentinels (radix's sentinel dialer).
			store.Type, store.MasterName = config.StoreRedisSentinel, parts[0]
			store.Addrs, sentinelCreds = parseRedisAddrs(e, v("URL"), url, parts[1:])
		}
	default:
		e.fail("%s=%q is not single, sentinel or cluster", v("TYPE"), t)
	}
	return store, creds, sentinelCreds
}

// redisAuth sets the section's credentials and database: as radix does,
// the AUTH variables win over the URLs' credentials, the user and the
// password each.
func redisAuth(e *envReader, prefix string, store *config.Store, creds, sentinelCreds redisURLCreds) {
	v := func(name string) string { return prefix + name }
	url := maskRedisURL(e.str(v("URL"), ""))
	if auth := e.str(v("AUTH"), ""); auth != "" {
		store.Username, store.Password = splitAuth(auth)
	}
	store.Username, store.Password = cmp.Or(store.Username, creds.user), cmp.Or(store.Password, creds.pass)
	switch {
	case creds.db == 0:
	case store.Type == config.StoreRedisCluster:
		e.fail("%s=%q: a cluster has only database 0, not %d: remove the /%d", v("URL"), url, creds.db, creds.db)
	default:
		store.DB = creds.db
	}
	if sentinelCreds.db != 0 {
		e.fail("%s=%q: the database %d of a sentinel's URL is not the primary's: the peer sends its SELECT to the sentinel, which has none; remove the /%d",
			v("URL"), url, sentinelCreds.db, sentinelCreds.db)
	}
	if auth := e.str(v("SENTINEL_AUTH"), ""); auth != "" {
		if store.Type != config.StoreRedisSentinel {
			e.note("%s: ignored, as by the peer, because %s is not sentinel", v("SENTINEL_AUTH"), v("TYPE"))
		} else {
			store.SentinelUsername, store.SentinelPassword = splitAuth(auth)
		}
	}
	if store.Type == config.StoreRedisSentinel {
		store.SentinelUsername = cmp.Or(store.SentinelUsername, sentinelCreds.user)
		store.SentinelPassword = cmp.Or(store.SentinelPassword, sentinelCreds.pass)
	}
}

// redisTimeout reads the Redis's timeout (name): 0 when unset or, as the
// peer reads it, no timeout. The peer's bounds connecting to Redis
// (radix's dialer) and its calls have no deadline of their own; each
// floodgate store call always has one, so 0 is floodgate's default.
func redisTimeout(e *envReader, name string) time.Duration {
	raw, ok := e.lookup(name)
	if !ok {
		e.note("%s: unset, so floodgate's own store timeout applies (%s), not the peer's 10s", name, redisstore.DefaultTimeout)
		return 0
	}
	d := e.duration(name, 0)
	if _, err := time.ParseDuration(raw); err == nil && d <= 0 {
		e.note("%s=%s: for the peer no timeout at all (it connects and waits for Redis without a deadline); every floodgate store call has one, "+
			"so floodgate's own %s applies: a Redis slower than that is an outage, answered by the rules' failure mode. Set %s to a duration "+
			"from 1ms to 1m to choose it", name, raw, redisstore.DefaultTimeout, name)
		return 0
	}
	return d
}

// splitAuth splits the peer's "user:password" (or "password") credentials.
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// checkStore checks the section the variables of prefix (REDIS_ or
// REDIS_PERSECOND_) set as a config file's is checked
// (config.Store.Validate), each error naming the variables behind the
// key refused.
func checkStore(e *envReader, prefix string, s config.Store) {
	s.PerSecond = nil // checked on its own, under its own variables
	for _, err := range joined(s.Validate()) {
		var fe *config.FieldError
		if !errors.As(err, &fe) {
			e.refuse([]string{prefix + "TYPE", prefix + "URL"}, "", maskRedisURL(err.Error()))
			continue
		}
		key := strings.TrimPrefix(fe.Path, "store.")
		vars, showValue := storeKeyVars(prefix, key)
		value := ""
		if showValue && fe.Value != "" {
			value = maskRedisURL(fe.Value) + addrLabel(key, s)
		}
		e.refuse(vars, value, fe.Reason)
	}
}

// storeKeys are the variables that set each key of a store section. Names
// written in full (REDIS_TLS_CACERT, CACHE_KEY_PREFIX) are shared by both
// Redis, as by the peer; the others take the section's prefix (URL:
// REDIS_URL or REDIS_PERSECOND_URL). An unlisted key is set by the
// section's type and URL.
var storeKeys = map[string][]string{
	"addrs": {"URL", "SOCKET_TYPE"}, "master_name": {"URL"}, "db": {"URL"},
	"username": {"AUTH", "URL"}, "password": {"AUTH", "URL"},
	"sentinel_username": {"SENTINEL_AUTH", "URL"}, "sentinel_password": {"SENTINEL_AUTH", "URL"},
	"key_prefix": {"CACHE_KEY_PREFIX"}, "timeout": {"TIMEOUT"}, "flush_delay": {"PIPELINE_WINDOW"},
	"tls":         {"TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT"},
	"tls_ca_file": {"REDIS_TLS_CACERT"}, "tls_cert_file": {"REDIS_TLS_CLIENT_CERT"}, "tls_key_file": {"REDIS_TLS_CLIENT_KEY"},
	"tls_skip_hostname_verification": {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"},
}

// storeKeyVars names the variables that set key (such as addrs[1]) in the
// section of prefix (REDIS_ or REDIS_PERSECOND_), and whether its value
// may be shown: never a credential, nor the TLS section's summary.
func storeKeyVars(prefix, key string) (vars []string, showValue bool) {
	base, _, _ := strings.Cut(key, "[")
	names, ok := storeKeys[base]
	if !ok {
		names = []string{"TYPE", "URL"}
	}
	for _, n := range names {
		if full := strings.HasPrefix(n, "REDIS_") || strings.HasPrefix(n, "CACHE_"); !full {
			n = prefix + n
		}
		vars = append(vars, n)
	}
	return vars, !strings.Contains(base, "username") && !strings.Contains(base, "password") && base != "tls"
}

// addrLabel names, for an error about the address addrs[i] of s, which one
// of REDIS_URL's it is: " (its address 2)" when there are several, or
// " (its sentinel 1)" after a sentinel list's master name; "" otherwise.
func addrLabel(key string, s config.Store) string {
	var i int
	if _, err := fmt.Sscanf(key, "addrs[%d]", &i); err != nil {
		return ""
	}
	switch {
	case s.Type == config.StoreRedisSentinel:
		return fmt.Sprintf(" (its sentinel %d)", i+1)
	case len(s.Addrs) > 1:
		return fmt.Sprintf(" (its address %d)", i+1)
	}
	return ""
}

// joined returns the errors errors.Join put together in err: err alone if
// it is not such a join, none if it is nil.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
