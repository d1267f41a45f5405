package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/storetest"
)

func TestKeySlotFunction(t *testing.T) {
	// Vectors from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	cases := map[string]int{"foo": 12182, "{user1000}.following": 3443, "{user1000}.followers": 3443, "123456789": 12739, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015}
	for k, want := range cases {
		if got := keySlot(k); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", k, got, want)
		}
	}
}

// identities returns the hostile identities plus a few more shapes.
func identities() []string {
	ids := append(storetest.HostileKeys(),
		"%", "%7B", "{", "%25", "=", "#", "#abc", "=x", "a%b{c}d", "192.0.2.1", "2001:db8::1",
		strings.Repeat("x", maxPlainIdentity), strings.Repeat("x", maxPlainIdentity+1),
		strings.Repeat("{", maxPlainIdentity), strings.Repeat("%", maxPlainIdentity+1))
	return ids
}

func TestKeyLayout(t *testing.T) {
	long := strings.Repeat("k", maxPlainIdentity+1)
	sum := sha256.Sum256([]byte(long))
	braced := sha256.Sum256([]byte("{" + long + "}"))
	cases := []struct {
		prefix, id string
		alg        floodgate.Algorithm
		want       string
	}{
		{"fg:", "", floodgate.SlidingWindowLog, "fg:{=}:swl"},
		{"fg:", "user42", floodgate.TokenBucket, "fg:{=user42}:tb"},
		{"", "{a}", floodgate.SlidingWindowCounter, "{@=a}=%7Ba%7D:swc"},
		{"fg:", "{user42}/login", floodgate.TokenBucket, "fg:{@=user42}=%7Buser42%7D/login:tb"},
		{"fg:", "a{}{b}c", floodgate.TokenBucket, "fg:{=a%7B%7D%7Bb%7Dc}:tb"}, // an empty {} is no tag
		{"fg:", "}{x", floodgate.TokenBucket, "fg:{=%7D%7Bx}:tb"},
		{"fg:", "{" + long + "}", floodgate.FixedWindow, "fg:{@#" + hex.EncodeToString(sum[:]) + "}#" + hex.EncodeToString(braced[:]) + ":fw"},
		{"x", "50%", floodgate.FixedWindow, "x{=50%25}:fw"},
		{"fg:", "a\x00\n\xff", floodgate.FixedWindow, "fg:{=a\x00\n\xff}:fw"},
		{"fg:", strings.Repeat("k", maxPlainIdentity), floodgate.FixedWindow, "fg:{=" + strings.Repeat("k", maxPlainIdentity) + "}:fw"},
		{"fg:", long, floodgate.TokenBucket, "fg:{#" + hex.EncodeToString(sum[:]) + "}:tb"},
	}
	for _, c := range cases {
		if got := Key(c.prefix, c.id, c.alg); got != c.want {
			t.Errorf("Key(%q, %q, %s) = %q, want %q", c.prefix, c.id, c.alg, got, c.want)
		}
	}
	s := &Store{prefix: "p:"}
	if got, want := s.Key("id", floodgate.TokenBucket), "p:{=id}:tb"; got != want {
		t.Errorf("Store.Key = %q, want %q", got, want)
	}
}

// TestKeySuffixes: every algorithm's keys end in a suffix of its own, and
// the four first ones keep the suffixes their stored keys have always had.
func TestKeySuffixes(t *testing.T) {
	seen := map[string]floodgate.Algorithm{}
	for _, a := range algorithmlist.All() {
		sfx := suffixes[a]
		if prev, dup := seen[sfx]; dup || sfx == "" {
			t.Errorf("%s and %s share the key suffix %q: give the new algorithm a name whose words have other initials", prev, a, sfx)
		}
		seen[sfx] = a
	}
	for a, want := range map[floodgate.Algorithm]string{floodgate.SlidingWindowLog: "swl", floodgate.TokenBucket: "tb",
		floodgate.SlidingWindowCounter: "swc", floodgate.FixedWindow: "fw"} {
		if suffixes[a] != want {
			t.Errorf("%s: suffix %q, want %q (the keys already stored)", a, suffixes[a], want)
		}
	}
}

// TestKeyProperties: for every identity, all keys share one non-empty,
// brace-free hash tag, which is that of every identity holding the same
// tag of its own; distinct identities never share a key; keys stay
// bounded.
func TestKeyProperties(t *testing.T) {
	ids := identities()
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(300))
		for i := range b {
			b[i] = "{}%=#ab\x00\xff"[r.IntN(9)]
		}
		ids = append(ids, string(b))
	}
	seen := map[string]string{}
	for _, id := range ids {
		var tag string
		for _, alg := range algorithmlist.All() {
			k := Key("app:", id, alg)
			if len(k) > len("app:")+777 {
				t.Errorf("key for a %d-byte identity is %d bytes, want at most %d", len(id), len(k), len("app:")+777)
			}
			if own, ok := identityTag(id); ok && hashTag(k) != hashTag(Key("app:", "{"+own+"}", alg)) {
				t.Errorf("identity %q and {%s} hold one tag, but their keys have the tags %q and %q", id, own, hashTag(k), hashTag(Key("app:", "{"+own+"}", alg)))
			}
			ht := hashTag(k)
			if ht == k || ht == "" || strings.ContainsAny(ht, "{}") {
				t.Fatalf("key %q: hash tag %q is not a proper tag", k, ht)
			}
			if tag == "" {
				tag = ht
			} else if ht != tag {
				t.Fatalf("identity %q: keys carry tags %q and %q", id, tag, ht)
			}
			if other, dup := seen[k]; dup && other != id {
				t.Fatalf("identities %q and %q share key %q", other, id, k)
			}
			seen[k] = id
		}
	}
}

// TestNumberStrings: the cache of decimal strings answers every number
// right, whether its slot holds it, another number or nothing, from many
// goroutines at once.
func TestNumberStrings(t *testing.T) {
	var c numberStrings
	values := []int64{0, 1, 99, 100, 1000, 1_000_000, 60_000_000, 1 << 40, -5, 9007199254740992}
	for i := range int64(500) {
		values = append(values, 100+i*7919)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 3 {
				for _, v := range values {
					if got, want := c.format(v), strconv.FormatInt(v, 10); got != want {
						t.Errorf("format(%d) = %q, want %q", v, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if got := (*numberStrings)(nil).format(12345); got != "12345" {
		t.Errorf("nil cache: format(12345) = %q", got)
	}
}
