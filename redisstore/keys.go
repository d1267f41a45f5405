package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
)

// maxPlainIdentity is the longest identity that appears (escaped) in a key;
// longer ones are hashed, so keys stay bounded.
const maxPlainIdentity = 128

// suffixes name each algorithm's key after the hash tag, indexed by
// algorithm: the initials of the words of its name ("swl" for
// sliding_window_log, "tb", "swc", "fw"), so that a new algorithm needs no
// entry here (TestKeySuffixes keeps them distinct).
var suffixes = keySuffixes()

func keySuffixes() []string {
	algs := algorithmlist.All()
	out := make([]string, algs[len(algs)-1]+1)
	for _, a := range algs {
		for word := range strings.SplitSeq(a.String(), "_") {
			out[a] += word[:1]
		}
	}
	return out
}

// Key returns the Redis key that holds the state of identity under
// algorithm alg, for a store with the given key prefix (Config.KeyPrefix, or
// DefaultKeyPrefix):
//
//	prefix + "{" + enc(identity) + "}:" + suffix
//
// where suffix is the algorithm's own ("swl", "tb", "swc", "fw"), and enc(s)
// is "=" followed by s with '%', '{' and '}' percent-escaped (%25, %7B, %7D)
// for strings of up to 128 bytes, and "#" followed by the hex SHA-256 of s
// for longer ones. An identity that holds a Redis Cluster hash tag of its
// own, a non-empty text between its first '{' and the first '}' after it,
// keeps it:
//
//	prefix + "{@" + enc(tag) + "}" + enc(identity) + ":" + suffix
//
// so identities that share a tag ("{user42}/login", "{user42}/api") share
// a slot, where AllowBatch decides their items atomically. Either way the
// key's own tag is never empty and holds no braces: all keys of one
// identity share a slot whatever the identity. The encoding is injective,
// so distinct identities never share a key, and a key is at most
// len(prefix) + 777 bytes long.
//
// Other languages that call the scripts directly should build keys the same
// way to share state with Go services (see docs/LUA.md).
func Key(prefix, identity string, alg floodgate.Algorithm) string {
	suffix := "x"
	if int(alg) < len(suffixes) && suffixes[alg] != "" {
		suffix = suffixes[alg]
	}
	var b strings.Builder
	tag, tagged := identityTag(identity)
	b.Grow(len(prefix) + 2*len(identity) + 16)
	b.WriteString(prefix)
	if tagged {
		b.WriteString("{@")
		encode(&b, tag)
		b.WriteByte('}')
		encode(&b, identity)
		b.WriteByte(':')
	} else {
		b.WriteByte('{')
		encode(&b, identity)
		b.WriteString("}:")
	}
	b.WriteString(suffix)
	return b.String()
}

// Key returns the Redis key that holds the state of identity under
// algorithm alg in this store: Key(prefix, identity, alg) with the store's
// prefix.
func (s *Store) Key(identity string, alg floodgate.Algorithm) string {
	return Key(s.prefix, identity, alg)
}

// identityTag returns the hash tag identity holds, as Redis Cluster reads
// one: the text between the first '{' and the first '}' after it, if not
// empty.
func identityTag(identity string) (string, bool) {
	if i := strings.IndexByte(identity, '{'); i >= 0 {
		if j := strings.IndexByte(identity[i+1:], '}'); j > 0 {
			return identity[i+1 : i+1+j], true
		}
	}
	return "", false
}

// encode writes enc(s) to b: "=" and s with '%', '{' and '}' escaped, or
// "#" and the hex SHA-256 of s for strings longer than maxPlainIdentity.
func encode(b *strings.Builder, s string) {
	if len(s) > maxPlainIdentity {
		sum := sha256.Sum256([]byte(s))
		var hx [2 * sha256.Size]byte
		hex.Encode(hx[:], sum[:])
		b.WriteByte('#')
		b.Write(hx[:])
		return
	}
	b.WriteByte('=')
	for i := 0; i < len(s); {
		j := strings.IndexAny(s[i:], "%{}")
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		b.WriteString(s[i : i+j])
		switch s[i+j] {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		default:
			b.WriteString("%7D")
		}
		i += j + 1
	}
}

// crc16 is CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^b[i]]
	}
	return crc
}

// crcTable holds crc16 of every byte, for one step per byte.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// hashTag returns the part of key Redis Cluster hashes: its tag (see
// identityTag), or the whole key if it has none.
func hashTag(key string) string {
	if tag, ok := identityTag(key); ok {
		return tag
	}
	return key
}

// keySlot computes CLUSTER KEYSLOT key: the Redis Cluster hash slot of key.
func keySlot(key string) int { return int(crc16(hashTag(key)) % 16384) }
