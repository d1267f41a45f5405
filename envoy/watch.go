package envoy

import (
	"context"
	"crypto/sha256"
	"time"
)

// DefaultWatchInterval is how often [Service.Watch] looks at a rule folder.
const DefaultWatchInterval = time.Second

// Watch reloads the rules of dir into s whenever the folder's files change,
// until ctx ends, as envoyproxy/ratelimit's runtime loader does. Every
// interval (DefaultWatchInterval when 0) it hashes every path and content
// Load would read, so edits, new and removed files and the swap of a
// mounted Kubernetes ConfigMap are all seen, even before Watch started. A
// folder that does not load keeps the rules in force: Watch counts the
// failure once per state of the folder (ratelimit_service_config_load_error)
// and passes the error to failed; each successful load is passed to loaded.
// Both may be nil.
func (s *Service) Watch(ctx context.Context, dir string, opts LoadOptions, interval time.Duration, loaded func(*Rules), failed func(error)) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	var broken [32]byte // the hash of the folder that last failed to load
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		srcs, _, err := readFolder(dir, opts)
		h := hashSources(srcs, err)
		if h != s.Rules().hash && h != broken {
			rules, err := Load(dir, opts)
			switch {
			case err != nil:
				broken = h
				s.LoadFailed()
				if failed != nil {
					failed(err)
				}
			default:
				s.SetRules(rules)
				if loaded != nil {
					loaded(rules)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// hashSources hashes the names and contents of srcs, or err when the
// folder could not be read.
func hashSources(srcs []Source, err error) [32]byte {
	h := sha256.New()
	if err != nil {
		h.Write([]byte(err.Error()))
	}
	for _, s := range srcs {
		h.Write([]byte(s.Name))
		h.Write([]byte{0})
		h.Write(s.Data)
		h.Write([]byte{0})
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
