package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// maxPlainIdentity is the longest identity that appears (escaped) in a key;
// longer ones are hashed, so keys stay bounded.
const maxPlainIdentity = 128

// suffixes name each algorithm's key after the hash tag.
var suffixes = [...]string{
	floodgate.SlidingWindowLog:     "swl",
	floodgate.TokenBucket:          "tb",
	floodgate.SlidingWindowCounter: "swc",
	floodgate.FixedWindow:          "fw",
}

// Key returns the Redis key that holds the state of identity under
// algorithm alg, for a store with the given key prefix (Config.KeyPrefix, or
// DefaultKeyPrefix):
//
//	prefix + "{" + tag + "}:" + suffix
//
// where suffix is "swl", "tb", "swc" or "fw" (alg must be valid), and tag
// encodes the identity: "=" followed by the identity with '%', '{' and '}'
// percent-escaped (%25, %7B, %7D) for identities of up to 128 bytes, and "#"
// followed by the hex SHA-256 of the identity for longer ones. The tag is never empty and holds
// no braces, so it is the key's Redis Cluster hash tag whatever the
// identity: all keys of one identity share a slot. The encoding is
// injective, so distinct identities never share a key, and a key is at most
// len(prefix) + 391 bytes long.
//
// Other languages that call the scripts directly should build keys the same
// way to share state with Go services (see docs/LUA.md).
func Key(prefix, identity string, alg floodgate.Algorithm) string {
	suffix := "x"
	if int(alg) < len(suffixes) && suffixes[alg] != "" {
		suffix = suffixes[alg]
	}
	return key(prefix, identity, suffix)
}

// Key returns the Redis key that holds the state of identity under
// algorithm alg in this store: Key(prefix, identity, alg) with the store's
// prefix.
func (s *Store) Key(identity string, alg floodgate.Algorithm) string {
	return Key(s.prefix, identity, alg)
}

func key(prefix, identity, suffix string) string {
	var b strings.Builder
	if len(identity) > maxPlainIdentity {
		sum := sha256.Sum256([]byte(identity))
		b.Grow(len(prefix) + 2 + 2*len(sum) + 2 + len(suffix))
		b.WriteString(prefix)
		b.WriteString("{#")
		b.WriteString(hex.EncodeToString(sum[:]))
	} else {
		b.Grow(len(prefix) + 2 + len(identity) + 2 + len(suffix))
		b.WriteString(prefix)
		b.WriteString("{=")
		for i := 0; i < len(identity); {
			j := strings.IndexAny(identity[i:], "%{}")
			if j < 0 {
				b.WriteString(identity[i:])
				break
			}
			b.WriteString(identity[i : i+j])
			switch identity[i+j] {
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
	b.WriteString("}:")
	b.WriteString(suffix)
	return b.String()
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

// hashTag returns the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, if not empty; otherwise the key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// keySlot computes CLUSTER KEYSLOT key: the Redis Cluster hash slot of key.
func keySlot(key string) int { return int(crc16(hashTag(key)) % 16384) }
