package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate/config"
)

// Bounds of `floodgate health`: the default wait for the whole exchange,
// the longest one allowed, and how much of the answer it reads.
const (
	healthTimeout    = 5 * time.Second
	healthMaxTimeout = time.Minute
	healthMaxBody    = 64 << 10
	healthMaxReason  = 200 // bytes of the answer repeated in a failure
)

// runHealth asks a running floodgate serve's probe, /readyz (the store
// answers) or /healthz (the process answers), and exits 0 only on 200: a
// container's HEALTHCHECK or an exec probe, in an image with no shell and
// no curl.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", "health [--config FILE | --url URL] [--probe ready|live] [--timeout D] [--ca-file FILE] [--cert-file FILE --key-file FILE] [--server-name NAME]", stderr)
	cfgPath := fs.String("config", "", "the serve's YAML config `file`: the probe is asked on its metrics_listen, or without one on its listen (https with tls)")
	base := fs.String("url", "", "base `URL` of the listener to ask instead, such as http://127.0.0.1:9090")
	probe := fs.String("probe", "ready", "`ready` (GET /readyz: the store answers) or live (GET /healthz: the process answers)")
	timeout := fs.Duration("timeout", healthTimeout, fmt.Sprintf("the longest `wait` for the answer, at most %s", healthMaxTimeout))
	var remote remoteOpts
	fs.StringVar(&remote.caFile, "ca-file", "", "with an https URL: PEM `file` of the CAs to trust for the server's certificate (default: the system's roots)")
	fs.StringVar(&remote.certFile, "cert-file", "", "with an https URL: PEM `file` of the client certificate to present, for a server with mutual TLS (with --key-file)")
	fs.StringVar(&remote.keyFile, "key-file", "", "with an https URL: PEM `file` of the client certificate's key (with --cert-file)")
	fs.StringVar(&remote.serverName, "server-name", "", "with an https URL: the `name` the server's certificate must hold, when it names no loopback address (default: the URL's host)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(msg string) error {
		fmt.Fprintln(stderr, "floodgate health: "+msg)
		fs.Usage()
		return errUsage
	}
	paths := map[string]string{"ready": "/readyz", "live": "/healthz"}
	path, ok := paths[*probe]
	switch {
	case !ok:
		return usageErr(fmt.Sprintf("--probe %q: want ready or live", *probe))
	case *cfgPath != "" && *base != "":
		return usageErr("--config and --url exclude each other")
	case *timeout <= 0 || *timeout > healthMaxTimeout:
		return usageErr(fmt.Sprintf("--timeout %s: want more than 0 and at most %s", *timeout, healthMaxTimeout))
	case (remote.certFile == "") != (remote.keyFile == ""):
		return usageErr("--cert-file and --key-file go together: a client certificate and its key")
	}
	target := *base
	if target == "" {
		cfg := config.Default()
		if *cfgPath != "" {
			var err error
			if cfg, err = config.Load(*cfgPath); err != nil {
				return fmt.Errorf("floodgate health: %w", err)
			}
		}
		target = probeBase(cfg)
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErr(fmt.Sprintf("--url %q is not a base URL such as http://127.0.0.1:9090", target))
	}
	if remote.tls() && u.Scheme != "https" {
		return usageErr(fmt.Sprintf("--ca-file, --cert-file, --key-file and --server-name apply to an https URL only, not %s", target))
	}
	probeURL := strings.TrimSuffix(u.String(), "/") + path
	msg, err := askProbe(ctx, probeURL, remote, *timeout)
	if err != nil {
		return fmt.Errorf("floodgate health: %w", err) // exit status 1, the line on stderr
	}
	fmt.Fprintln(stdout, msg)
	return nil
}

// probeBase returns the base URL of cfg's probes as seen from the same
// machine: its metrics listener, plain HTTP, when it has one, and its API
// listener otherwise (https with tls). An address on every interface
// (0.0.0.0, [::], or no host) is asked on loopback.
func probeBase(cfg *config.Config) string {
	if cfg.MetricsListen != "" {
		return "http://" + loopbackAddr(cfg.MetricsListen)
	}
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	return scheme + "://" + loopbackAddr(cfg.Listen)
}

// loopbackAddr returns addr with an unspecified host replaced by the
// loopback address of its family.
func loopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// askProbe GETs probeURL within timeout and returns a line saying it is
// healthy, or an error of one line saying why not: no answer, or a status
// other than 200 with the answer's reason.
func askProbe(ctx context.Context, probeURL string, o remoteOpts, timeout time.Duration) (string, error) {
	client, err := o.client()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeURL, nil)
	if err != nil {
		return "", err
	}
	res, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "", fmt.Errorf("%s: no answer within %s", probeURL, timeout)
		}
		var ue *url.Error // "Get URL: why": the URL is said once
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("%s: %v", probeURL, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, healthMaxBody))
	if err != nil {
		return "", fmt.Errorf("%s answered %s, then the body failed: %v", probeURL, res.Status, err)
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %s: %s", probeURL, res.Status, probeReason(raw))
	}
	return fmt.Sprintf("healthy: %s answered %s", probeURL, res.Status), nil
}

// probeReason is the reason an unhealthy answer gives, on one line: a
// problem's detail, or the start of the body.
func probeReason(raw []byte) string {
	var p struct {
		Detail string `json:"detail"`
	}
	s := string(raw)
	if json.Unmarshal(raw, &p) == nil && p.Detail != "" {
		s = p.Detail
	}
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "?")), " ")
	if len(s) > healthMaxReason {
		cut := healthMaxReason
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	if s == "" {
		s = "(no body)"
	}
	return s
}
