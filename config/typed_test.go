package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStoreValidate: a store section built in Go is checked as Parse
// checks a file's, each error a *FieldError naming the key's path and its
// value, without a line.
func TestStoreValidate(t *testing.T) {
	redis := func(s Store) Store {
		s.Type, s.Addrs = StoreRedis, []string{"redis:6379"}
		return s
	}
	tests := []struct {
		name  string
		store Store
		want  []FieldError // Path, Value and the start of Reason
	}{
		{"a valid Redis", redis(Store{Timeout: 30 * time.Millisecond, KeyPrefix: "rl:"}), nil},
		{"the memory store", Store{}, nil},
		{"a timeout over a minute", redis(Store{Timeout: 2 * time.Minute}),
			[]FieldError{{Path: "store.timeout", Value: "2m0s", Reason: "must be between 1ms and 1m"}}},
		{"a key prefix with braces", redis(Store{KeyPrefix: "{x}"}),
			[]FieldError{{Path: "store.key_prefix", Value: `"{x}"`, Reason: "must not contain '{' or '}'"}}},
		{"a cluster's second address", Store{Type: StoreRedisCluster, Addrs: []string{"a:1", "b:99999"}},
			[]FieldError{{Path: "store.addrs[1]", Value: `"b:99999"`, Reason: "has port 99999"}}},
		{"a missing CA file", redis(Store{TLS: true, TLSCAFile: "/nonexistent/ca.pem"}),
			[]FieldError{{Path: "store.tls_ca_file", Value: "/nonexistent/ca.pem", Reason: "no such file or directory"}}},
		{"the per-second store's address and timeout", redis(Store{PerSecond: &Store{Type: StoreRedis, Addrs: []string{"ps:0"}, Timeout: time.Hour}}),
			[]FieldError{
				{Path: "store.per_second.timeout", Value: "1h0m0s", Reason: "must be between 1ms and 1m"},
				{Path: "store.per_second.addrs[0]", Value: `"ps:0"`, Reason: "has port 0"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.store.Validate()
			var got []error // errors.Join's, one or more
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				got = j.Unwrap()
			} else if err != nil {
				got = []error{err}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors", err, len(tt.want))
			}
			for i, w := range tt.want {
				var fe *FieldError
				if !errors.As(got[i], &fe) || fe.Path != w.Path || fe.Value != w.Value || !strings.HasPrefix(fe.Reason, w.Reason) || fe.Line != 0 {
					t.Errorf("error %d = %#v, want path %s, value %s, reason %q..., no line", i, got[i], w.Path, w.Value, w.Reason)
				}
			}
		})
	}
}

// TestListenClash: two listeners clash on the same address, or on a port
// one takes on every interface; never on port 0 or on an address
// CheckListen refuses.
func TestListenClash(t *testing.T) {
	for _, tt := range []struct{ a, b, want string }{
		{"0.0.0.0:8080", "0.0.0.0:8080", "takes the same address"},
		{"localhost:8080", "127.0.0.1:8080", "takes the same address"},
		{"127.0.0.1:8080", "0.0.0.0:8080", "takes the same port on every interface"},
		{":8080", "[::1]:8080", "takes the same port on every interface"},
		{"0.0.0.0:8080", "0.0.0.0:8081", ""},
		{"127.0.0.1:8080", "127.0.0.2:8080", ""},
		{"0.0.0.0:0", "0.0.0.0:0", ""},
		{"a b:8080", "0.0.0.0:8080", ""},
	} {
		if got := ListenClash(tt.a, tt.b); got != tt.want {
			t.Errorf("ListenClash(%s, %s) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}
