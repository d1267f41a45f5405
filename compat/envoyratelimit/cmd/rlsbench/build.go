package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// profileAll loads each floodgate that serves profiles once more, for the
// round's duration, and writes its CPU and allocation profiles over that
// load into cfg.profile.
func profileAll(cfg config, svcs []*service) error {
	if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
		return err
	}
	for _, s := range svcs {
		if s.pprof == "" {
			if !s.peer {
				fmt.Printf("%s: no --pprof-listen in that build, not profiled\n", s.name)
			}
			continue
		}
		warm(s, cfg)
		secs := max(1, int(cfg.duration.Seconds()))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, kind := range []string{"profile", "allocs"} {
			wg.Go(func() {
				url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", s.pprof, kind, secs)
				errs[i] = fetch(url, filepath.Join(cfg.profile, map[string]string{"profile": "cpu", "allocs": "allocs"}[kind]+"-"+s.file+".pprof"))
			})
		}
		time.Sleep(100 * time.Millisecond) // both profiles have started
		res, err := loadOnce(s, cfg, procs{server: s.pid}, time.Duration(secs)*time.Second)
		wg.Wait()
		if err := errors.Join(append(errs, err)...); err != nil {
			return fmt.Errorf("profiling %s: %w", s.name, err)
		}
		fmt.Printf("profiled %s over %d decisions (%.0f/s, CPU/decision %s): %s\n", s.name, res.decisions,
			float64(res.decisions)/res.elapsed.Seconds(), (res.cpu / time.Duration(max(res.decisions, 1))).Round(100*time.Nanosecond),
			filepath.Join(cfg.profile, "{cpu,allocs}-"+s.file+".pprof"))
	}
	return nil
}

// fetch writes what GET url answers into the file out.
func fetch(url, out string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// servesProfiles reports whether the floodgate binary bin has serve's
// --pprof-listen flag (a build of an older revision may not).
func servesProfiles(bin string) bool {
	out, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	return strings.Contains(string(out), "pprof-listen")
}

// buildAt builds floodgate's command at the git revision rev of the
// repository this module sits in (its files as committed, through git
// archive, in a folder under tmp) into the binary out.
func buildAt(out, rev, tmp string) error {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/floodgate-rl/floodgate").Output()
	if err != nil {
		return fmt.Errorf("finding floodgate's module: %w", err)
	}
	src, err := os.MkdirTemp(tmp, "base-")
	if err != nil {
		return err
	}
	archive := exec.Command("git", "-C", strings.TrimSpace(string(root)), "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var archiveErr strings.Builder
	archive.Stderr = &archiveErr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %w: %s", rev, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("unpacking %s: %w", rev, err)
	}
	cmd := exec.Command("go", "build", "-o", out, "./cmd/floodgate")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building floodgate at %s: %w\n%s", rev, err, b)
	}
	return nil
}
