package envoy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestWatchConfigMapSwap: Watch picks up an edit, the atomic swap of a
// ConfigMap's ..data link, and keeps the rules in force (counting an error)
// when an edit breaks the folder. It runs in a synctest bubble: the watch's
// ticker and the waits below move on the bubble's clock, which advances
// only when every goroutine waits, so no real time passes between looks.
func TestWatchConfigMapSwap(t *testing.T) { synctest.Test(t, testWatchConfigMapSwap) }

func testWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	version := func(name, domain string) {
		t.Helper()
		must(os.Mkdir(filepath.Join(dir, name), 0o700))
		must(os.WriteFile(filepath.Join(dir, name, "rules.yaml"), []byte("domain: "+domain+"\n"), 0o600))
	}
	// swap points ..data at a version, atomically, as the kubelet does.
	swap := func(name string) {
		t.Helper()
		must(os.Symlink(name, filepath.Join(dir, "..data_tmp")))
		must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	}
	version("..v1", "one")
	swap("..v1")
	must(os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml")))

	rules, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	svc, e := watchedService(t, rules)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 10)
	go svc.Watch(ctx, dir, LoadOptions{}, 10*time.Millisecond, nil, func(err error) { errs <- err })

	// until waits (for at most ten seconds) until the rules in force have
	// the domain want.
	until := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for strings.Join(svc.Rules().Domains(), ",") != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: domains %v, want %s", what, svc.Rules().Domains(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	version("..v2", "two")
	swap("..v2")
	until("ConfigMap swap", "two")

	version("..v3", "three")
	must(os.WriteFile(filepath.Join(dir, "..v3", "rules.yaml"), []byte("domain: [broken\n"), 0o600))
	swap("..v3")
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "rules.yaml") {
			t.Errorf("reload error %v does not name the file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a broken folder was not reported")
	}
	if got := strings.Join(svc.Rules().Domains(), ","); got != "two" {
		t.Errorf("after a broken reload the rules are %s, want two (the rules in force)", got)
	}
	if got := e.counter(t, "ratelimit_service_config_load_error"); got != 1 {
		t.Errorf("config_load_error %v, want 1", got)
	}

	must(os.WriteFile(filepath.Join(dir, "..v3", "rules.yaml"), []byte("domain: three\n"), 0o600))
	until("fixed edit", "three")
	if got := e.counter(t, "ratelimit_service_config_load_success"); got != 3 {
		t.Errorf("config_load_success %v, want 3 (start, swap, fix)", got)
	}
}

// watchedService is a service on the memory store with rules, whose
// metrics e reads: the service a folder watch updates.
func watchedService(t *testing.T, rules *Rules) (*Service, *env) {
	t.Helper()
	mem, _ := memoryStore()
	reg := prometheus.NewRegistry()
	svc, err := New(mem, rules, Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return svc, &env{reg: reg}
}
