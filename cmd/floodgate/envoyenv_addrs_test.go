package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestRedisAddrsOneCheck: the three front doors of a Redis address — the
// library's Config.Validate, `floodgate config validate` (config.Parse) and
// `serve --envoy-env` — refuse and accept the same addresses, because only
// redisstore checks them; each error names its field (Addrs[0],
// store.addrs[0] and its line, REDIS_URL), the address and the fix.
func TestRedisAddrsOneCheck(t *testing.T) {
	dir := t.TempDir()
	rules := "rules:\n  - {name: r, algorithm: fixed_window, limit: 1, window: 1s}\n"
	for _, tc := range []struct {
		name, addr string
		unix       bool   // REDIS_SOCKET_TYPE=unix for the Envoy environment
		want       string // the reason, as redisstore words it; "" if valid
	}{
		{"host:port", "127.0.0.1:6379", false, ""},
		{"port 65535", "redis:65535", false, ""},
		{"unix socket", "/run/redis.sock", true, ""},
		{"port 99999", "127.0.0.1:99999", false, "has port 99999, not one from 1 to 65535: write host:port, such as redis:6379"},
		{"port 0", "127.0.0.1:0", false, "has port 0, not one from 1 to 65535"},
		{"no port", "redishost", false, "is not host:port: write host:port, such as redis:6379"},
		{"a named port", "redishost:redis", false, `has port "redis", which is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quoted := `"` + tc.addr + `"`
			check := func(door string, err error, want ...string) {
				t.Helper()
				if tc.want == "" {
					if err != nil {
						t.Errorf("%s refused %s: %v", door, tc.addr, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("%s accepted %s", door, tc.addr)
				}
				for _, w := range append(want, quoted+" "+tc.want) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %q, want it to contain %q", door, err, w)
					}
				}
			}

			// The library.
			err := (&redisstore.Config{Addrs: []string{tc.addr}, Mode: redisstore.ModeStandalone}).Validate()
			var ce *redisstore.ConfigError
			if err != nil && (!errors.As(err, &ce) || ce.Field != "Addrs[0]") {
				t.Errorf("Validate() = %v, want a *ConfigError for Addrs[0]", err)
			}
			check("redisstore.Config.Validate", err, "Addrs[0]")

			// floodgate config validate.
			path := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml",
				"listen: 127.0.0.1:0\nstore:\n  type: redis\n  addrs: ["+quoted+"]\n"+rules)
			var out, errOut bytes.Buffer
			err = run(t.Context(), []string{"config", "validate", path}, &out, &errOut)
			if err != nil {
				err = errors.New(err.Error() + " " + errOut.String())
			}
			check("config validate", err, filepath.Base(path)+": line 4: store.addrs[0]: ")

			// serve --envoy-env.
			vars := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": tc.addr, "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit"}
			if tc.unix {
				vars["REDIS_SOCKET_TYPE"] = "unix"
			}
			_, err = readEnvoyEnv(envOf(vars))
			check("--envoy-env", err, `REDIS_URL="`+tc.addr+`", REDIS_SOCKET_TYPE="tcp": `)
		})
	}
}

// TestEnvoyEnvRedisAddrs: the addresses of the peer's REDIS_URL lists, each
// checked by redisstore, named by their place in the list; a path with
// REDIS_SOCKET_TYPE=tcp is refused, as the peer would fail to dial it.
func TestEnvoyEnvRedisAddrs(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"a cluster's second node", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:99999"},
			`REDIS_URL="a:7000,b:99999": "b:99999" (its address 2) has port 99999, not one from 1 to 65535`},
		{"a sentinel's port 0", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1:26379,s2:0"},
			`REDIS_URL="m,s1:26379,s2:0": "s2:0" (its sentinel 2) has port 0, not one from 1 to 65535`},
		{"a URL's port", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis://u:secret@r:99999/1"},
			`REDIS_URL="redis://*****@r:99999/1", REDIS_SOCKET_TYPE="tcp": "r:99999" has port 99999`},
		{"the per-second Redis's port", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "ps:0"},
			`REDIS_PERSECOND_URL="ps:0", REDIS_PERSECOND_SOCKET_TYPE="tcp": "ps:0" has port 0`},
		{"a path over tcp", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "/run/redis.sock"},
			`REDIS_URL="/run/redis.sock": with REDIS_SOCKET_TYPE=tcp it is host:port, such as redis:6379; for a unix socket set REDIS_SOCKET_TYPE=unix`},
		{"a unix socket on a cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "/run/redis.sock"},
			`"/run/redis.sock" is a unix socket, which reaches one server only: cluster mode needs host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"REDIS_URL": "redis:6379", "USE_STATSD": "false", "RUNTIME_SUBDIRECTORY": "ratelimit"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			_, err := readEnvoyEnv(envOf(vars))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("readEnvoyEnv = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "store.") {
				t.Errorf("error %q shows a password or floodgate's field", err)
			}
		})
	}
}
