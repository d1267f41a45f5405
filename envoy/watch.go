package envoy

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DefaultWatchInterval is how often [Watch] looks at a rule folder.
const DefaultWatchInterval = time.Second

// Watch reloads the rules of dir into s whenever the folder's files change,
// until ctx ends, as envoyproxy/ratelimit's runtime loader does: it reads
// the folder every interval (DefaultWatchInterval when 0) and compares a
// hash of every path and content it would load, so an edit, a new or a
// removed file, and the atomic swap of a mounted Kubernetes ConfigMap (a
// "..data" link pointed at a new folder) are all seen. A folder that no
// longer loads keeps the rules in force: Watch counts the failure
// (ratelimit_service_config_load_error) and passes the error to failed;
// each load that succeeds is passed to loaded. Both may be nil.
func (s *Service) Watch(ctx context.Context, dir string, opts LoadOptions, interval time.Duration, loaded func(*Rules), failed func(error)) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	last := folderHash(dir, opts)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h := folderHash(dir, opts)
		if h == last {
			continue
		}
		last = h
		rules, err := Load(dir, opts)
		if err != nil {
			s.LoadFailed()
			if failed != nil {
				failed(err)
			}
			continue
		}
		s.SetRules(rules)
		if loaded != nil {
			loaded(rules)
		}
	}
}

// folderHash hashes the names and contents of the files Load would read
// (and any error meeting them, so that a folder that breaks and one that
// comes back both count as changes).
func folderHash(dir string, opts LoadOptions) [32]byte {
	h := sha256.New()
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		h.Write([]byte(path))
		h.Write([]byte{0})
		if err != nil {
			h.Write([]byte(err.Error()))
			return nil
		}
		if path != dir && len(e.Name()) > 0 && e.Name()[0] == '.' && !opts.DotFiles {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path) // follows links, as Load does
		if err != nil {
			h.Write([]byte(err.Error()))
		}
		h.Write(data)
		h.Write([]byte{0})
		return nil
	})
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
