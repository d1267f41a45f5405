package envoy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLoadPrefix: with LoadOptions.Prefix, Load reads the files
// envoyproxy/ratelimit reads with RUNTIME_WATCH_ROOT=true: those whose path
// relative to the folder, with / turned into a dot, starts with the prefix
// and a dot; dot-names as LoadOptions.DotFiles says.
func TestLoadPrefix(t *testing.T) {
	cases := []struct {
		path     string
		prefix   string
		dotFiles bool
		read     bool
	}{
		{"config.yaml", "config", false, true},
		{"config.x.yaml", "config", false, true},
		{"config.noext", "config", false, true},
		{"config/a.yaml", "config", false, true},
		{"config/sub/deeper/a", "config", false, true},
		{"config.d/a.yaml", "config", false, true},
		{"config", "config", false, false},       // the key "config" lacks the dot
		{"configs.yaml", "config", false, false}, // "configs." is not "config."
		{"xconfig.yaml", "config", false, false}, // not at the start
		{"other/config.yaml", "config", false, false},
		{"Config.yaml", "config", false, false}, // case counts
		{"config/.hidden.yaml", "config", true, true},
		{"config/.hidden.yaml", "config", false, false},
		{"config/.dir/a.yaml", "config", true, true},
		{"config/.dir/a.yaml", "config", false, false},
		{".config.yaml", "config", true, false}, // the key ".config.yaml" does not start with "config."
		{"..2026_01_01/config.yaml", "config", true, false},
		{"rl/v2.yaml", "rl", false, true},
		{"rl.v2/a.yaml", "rl.v2", false, true},
		{"rl/v2/a.yaml", "rl.v2", false, true}, // a dot in the prefix matches a folder too, as in the peer
		{"rl/v3.yaml", "rl.v2", false, false},
		{"anything/at/all.yaml", "", false, true},
		{".dot.yaml", "", true, true},
	}
	for _, c := range cases {
		t.Run(c.prefix+":"+c.path, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, c.path), "domain: d\n")
			write(t, filepath.Join(dir, "always", "config.yaml"), "domain: other\n") // read only with no prefix, or prefix "always"
			opts := LoadOptions{Prefix: c.prefix, DotFiles: c.dotFiles}
			srcs, skipped, err := readFolder(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range srcs {
				rel, _ := filepath.Rel(dir, s.Name)
				names = append(names, filepath.ToSlash(rel))
			}
			if got := slices.Contains(names, c.path); got != c.read {
				t.Errorf("read %v (skipped %v): %s read = %v, want %v", names, skipped, c.path, got, c.read)
			}
			if !c.read && !slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(filepath.Join(dir, c.path), s) }) {
				t.Errorf("%s is neither read nor listed as skipped (%v)", c.path, skipped)
			}
			if got, want := slices.Contains(names, "always/config.yaml"), c.prefix == ""; got != want {
				t.Errorf("always/config.yaml read = %v, want %v", got, want)
			}
		})
	}
}

// TestLoadPrefixRules: the files of a prefix load as one rule set, and a
// folder with none of them is an error that names the prefix.
func TestLoadPrefixRules(t *testing.T) {
	dir := t.TempDir()
	rl := func(domain string) string {
		return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	}
	write(t, filepath.Join(dir, "config.yaml"), rl("top"))
	write(t, filepath.Join(dir, "config.extra.yml"), rl("extra"))
	write(t, filepath.Join(dir, "config", "a.yaml"), rl("folder"))
	write(t, filepath.Join(dir, "config.d", "b"), rl("dotd"))
	write(t, filepath.Join(dir, "README.md"), "# not a rule file, and not read\n")
	rules, err := Load(dir, LoadOptions{Prefix: "config"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rules.Domains(), ","), "dotd,extra,folder,top"; got != want {
		t.Errorf("domains %s, want %s", got, want)
	}
	if r := rules.Match("dotd", []Entry{{Key: "k", Value: "v"}}); r == nil || r.Limit.Quota != 1 {
		t.Errorf("dotd.k: %+v", r)
	}
	// Without the prefix the README is read, and refused by name.
	if _, err := Load(dir, LoadOptions{}); err == nil || !strings.Contains(err.Error(), "README.md") {
		t.Errorf("no prefix: %v, want an error naming README.md", err)
	}
	if _, err := Load(dir, LoadOptions{Prefix: "rules"}); err == nil || !strings.Contains(err.Error(), "whose path starts with rules.") {
		t.Errorf("no file of the prefix: %v", err)
	}
}

// TestWatchPrefix: Watch reloads on a change to a file of the prefix, and
// not on one to a file outside it. In a synctest bubble (see
// TestWatchConfigMapSwap), so the ten watch intervals below are ten looks
// at the folder exactly, in no real time.
func TestWatchPrefix(t *testing.T) { synctest.Test(t, testWatchPrefix) }

func testWatchPrefix(t *testing.T) {
	dir := t.TempDir()
	opts := LoadOptions{Prefix: "config"}
	write(t, filepath.Join(dir, "config", "a.yaml"), "domain: one\n")
	write(t, filepath.Join(dir, "other.yaml"), "domain: [broken\n")
	rules, err := Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	svc, e := watchedService(t, rules)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loads := make(chan *Rules, 10)
	fails := make(chan error, 10)
	go svc.Watch(ctx, dir, opts, 10*time.Millisecond, func(r *Rules) { loads <- r }, func(err error) { fails <- err })

	// A file outside the prefix changes: nothing is loaded. A file of the
	// prefix changes afterwards: it is loaded, and is the first load seen.
	write(t, filepath.Join(dir, "other.yaml"), "domain: [still broken\n")
	write(t, filepath.Join(dir, "configs", "x.yaml"), "domain: [broken too\n")
	// Ten watch intervals and a half: the write below then falls between
	// two looks, while the watcher sleeps, so it never sees the file half
	// written (os.WriteFile truncates first).
	time.Sleep(105 * time.Millisecond)
	write(t, filepath.Join(dir, "config.two.yaml"), "domain: two\n")
	select {
	case r := <-loads:
		if got := strings.Join(r.Domains(), ","); got != "one,two" {
			t.Errorf("reloaded domains %s, want one,two", got)
		}
	case err := <-fails:
		t.Fatalf("a reload failed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a new file of the prefix was not loaded")
	}
	select {
	case err := <-fails:
		t.Errorf("a file outside the prefix was loaded: %v", err)
	default:
	}
	if got := e.counter(t, "ratelimit_service_config_load_success"); got != 2 {
		t.Errorf("config_load_success %v, want 2 (start, one reload)", got)
	}
}

// write writes data to path, making its folders.
func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
