package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/server"
)

// errDenied makes `floodgate check` exit non-zero when the request is over
// its limit, so shell scripts can branch on it.
var errDenied = errors.New("denied")

// runCheck decides one request: here, against the config's store, or by
// asking a running floodgate serve (--url).
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", "check [--config FILE | --url URL [--token-file FILE] [--ca-file FILE] [--cert-file FILE --key-file FILE]] --rule NAME --key KEY [--cost N] [--json]", stderr)
	cfgPath := fs.String("config", "", "YAML config `file` naming the store and rules (default: the built-in example on the memory store)")
	url := fs.String("url", "", "base `URL` of a running floodgate serve to ask (POST /v1/check), such as http://127.0.0.1:8080, instead of deciding here")
	var remote remoteOpts
	fs.StringVar(&remote.tokenFile, "token-file", "", "`file` holding a bearer token to send with --url")
	fs.StringVar(&remote.caFile, "ca-file", "", "with an https --url: PEM `file` of the CAs to trust for the server's certificate (default: the system's roots)")
	fs.StringVar(&remote.certFile, "cert-file", "", "with an https --url: PEM `file` of the client certificate to present, for a server with mutual TLS (with --key-file)")
	fs.StringVar(&remote.keyFile, "key-file", "", "with an https --url: PEM `file` of the client certificate's key (with --cert-file)")
	ruleName := fs.String("rule", "", "rule `name` to decide against")
	key := fs.String("key", "", "the `key` to limit (any valid UTF-8)")
	cost := fs.Int64("cost", 1, "request `cost`")
	asJSON := fs.Bool("json", false, "print the decision as JSON (the body of POST /v1/check)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(msg string) error {
		fmt.Fprintln(stderr, "floodgate check: "+msg)
		fs.Usage()
		return errUsage
	}
	switch {
	case *ruleName == "":
		return usageErr("--rule is required")
	case *key == "":
		return usageErr("--key is required: the key to limit, such as a client's address or an API key (an empty key would be one counter shared by every caller)")
	case *cfgPath != "" && *url != "":
		return usageErr("--config and --url exclude each other: --url asks a server that has its own config")
	case remote.tokenFile != "" && *url == "":
		return usageErr("--token-file applies to --url only")
	case remote.tls() && !strings.HasPrefix(*url, "https://"):
		return usageErr("--ca-file, --cert-file and --key-file apply to an https:// --url only")
	case (remote.certFile == "") != (remote.keyFile == ""):
		return usageErr("--cert-file and --key-file go together: a client certificate and its key")
	case !utf8.ValidString(*key):
		return usageErr("--key is not valid UTF-8; the server accepts only UTF-8 keys, so no such key is ever counted")
	}
	if *cost < 1 {
		return fmt.Errorf("--cost %d must be at least 1", *cost)
	}
	var resp server.CheckResponse
	var raw []byte
	if *url != "" {
		var err error
		if resp, raw, err = askServer(ctx, *url, remote, *ruleName, *key, *cost); err != nil {
			return err
		}
	} else {
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		if cfg.Store.Type == config.StoreMemory {
			fmt.Fprintf(stderr, "floodgate check: note: the memory store lives in this process only, so this check decides alone, "+
				"against a fresh store, and never sees what a server counted; use --url to ask a running floodgate serve, "+
				"or a config with a Redis store\n")
		}
		if resp, err = decideHere(ctx, cfg, *ruleName, *key, *cost); err != nil {
			return err
		}
		raw, _ = json.Marshal(resp)
	}
	if *asJSON {
		fmt.Fprintln(stdout, strings.TrimSpace(string(raw)))
	} else {
		printCheck(stdout, resp, *key, *cost)
	}
	if !resp.Allowed {
		return errDenied
	}
	return nil
}

// decideHere decides one request against cfg's store through the engine,
// as the server does: the same engine options, store key, failure mode,
// shadow mode and error policy.
func decideHere(ctx context.Context, cfg *config.Config, ruleName, key string, cost int64) (server.CheckResponse, error) {
	rule, err := configRule(cfg, ruleName)
	if err != nil {
		return server.CheckResponse{}, err
	}
	store, closeStore, err := openStore(cfg.Store)
	if err != nil {
		return server.CheckResponse{}, err
	}
	defer closeStore()
	engine, err := newEngine(store, cfg)
	if err != nil {
		return server.CheckResponse{}, err
	}
	return decideRule(ctx, engine, rule, key, cost)
}

// configRule returns the rule of cfg's policy named name.
func configRule(cfg *config.Config, name string) (server.Rule, error) {
	policy, err := cfg.Policy()
	if err != nil {
		return server.Rule{}, err
	}
	i := slices.IndexFunc(policy.Rules, func(r server.Rule) bool { return r.Name == name })
	if i < 0 {
		return server.Rule{}, fmt.Errorf("no rule named %q in %s", name, cfg.Source)
	}
	return policy.Rules[i], nil
}

// newEngine returns the engine floodgate serve decides with over store
// under cfg (server.New builds it from the same options: the config's
// over-limit cache, no deadline of its own), without logging.
func newEngine(store floodgate.Store, cfg *config.Config) (*decide.Engine, error) {
	return decide.New(store, decide.Options{Logger: slog.New(slog.DiscardHandler), OverLimitCache: cfg.OverLimitCache()})
}

// decideRule decides one request for key at cost under rule with engine,
// with the check the server builds (server.Rule.Check), and answers as the
// server's POST /v1/check would, or with the error it would answer.
func decideRule(ctx context.Context, engine *decide.Engine, rule server.Rule, key string, cost int64) (server.CheckResponse, error) {
	res := engine.Decide(ctx, []decide.Check{rule.Check(key, cost)})
	switch status := server.CheckStatus(&res); status {
	case http.StatusOK, http.StatusTooManyRequests:
		return server.NewCheckResponse(rule, &res), nil
	case http.StatusServiceUnavailable:
		return server.CheckResponse{}, fmt.Errorf("store unavailable, and rule %q fails closed: the server would answer 503: %w", rule.Name, res.Err())
	case http.StatusBadRequest:
		return server.CheckResponse{}, res.Err()
	default:
		return server.CheckResponse{}, fmt.Errorf("store error for rule %q: the server would answer %d, whatever the failure mode: %w", rule.Name, status, res.Err())
	}
}

// printCheck prints a decision in a line.
func printCheck(w io.Writer, r server.CheckResponse, key string, cost int64) {
	verdict := "allowed"
	switch {
	case !r.Allowed:
		verdict = "denied"
	case r.StoreUnavailable:
		fmt.Fprintf(w, "allowed: store unavailable, and rule %s fails open (limit %d; remaining unknown)\n", r.Rule, r.Limit)
		return
	case r.ShadowDenied:
		verdict = "allowed (shadow rule: would have denied)"
	}
	if r.LocalFallback {
		verdict += " (store unavailable: decided alone at the rule's local share)"
	}
	fmt.Fprintf(w, "%s: rule %s (limit %d), key %q, cost %d: remaining %d, retry after %s, reset after %s\n",
		verdict, r.Rule, r.Limit, key, cost, r.Remaining,
		time.Duration(r.RetryAfterMs)*time.Millisecond, time.Duration(r.ResetAfterMs)*time.Millisecond)
}

// runConfig validates a config file as serve would read it, lints a folder
// of Envoy rule files, or prints the built-in example.
func runConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	const synopsis = "config validate [--connect] [--store-api] FILE | config validate-envoy DIR | config example"
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprintf(stderr, "Usage: floodgate %s\n\n"+
			"  validate [--connect] [--store-api] FILE\n"+
			"                       check a config file with every check serve makes before it starts\n"+
			"                       (rules, store settings, listen addresses, the envoy_config folder);\n"+
			"                       errors name the line, field and value; --connect also connects to\n"+
			"                       the store; --store-api checks it as serve --store-api reads it\n"+
			"  validate-envoy DIR   check a folder of envoyproxy/ratelimit rule files alone\n"+
			"  example              print the built-in example config\n", synopsis)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "validate":
		fs := newFlagSet("config validate", "config validate [--connect] [--store-api] [--envoy-config DIR] FILE", stderr)
		connect := fs.Bool("connect", false, "connect to the store too, as serve does when it starts (a Redis store must then be reachable)")
		storeAPI := fs.Bool("store-api", false, "validate the file as serve --store-api reads it: store settings alone, with no rules, then serve remote stores")
		envoyDir := fs.String("envoy-config", "", "validate the file as serve --envoy-config `dir` reads it: with Envoy's rule files from dir (then a file with no rules of its own is a server)")
		if err := parseFlagsArgs(fs, args[1:], 1, 1); err != nil {
			return err
		}
		plan, err := planServe(fs.Arg(0), serveOverrides{storeAPI: *storeAPI, envoyConfig: *envoyDir})
		if err != nil {
			return err
		}
		if *connect {
			_, closeStore, err := openStore(plan.cfg.Store)
			if err != nil {
				return err
			}
			closeStore()
		}
		for _, w := range append(plan.warnings, plan.startWarnings()...) {
			fmt.Fprintln(stderr, "warning: "+w)
		}
		envoyRules := ""
		if plan.rules != nil {
			envoyRules = fmt.Sprintf(", envoy rules for %d domains", len(plan.rules.Domains()))
		}
		fmt.Fprintf(stdout, "%s: ok (%d rules, store %s%s)\n", fs.Arg(0), len(plan.policy.Rules), plan.cfg.Store.String(), envoyRules)
		return nil
	case "validate-envoy":
		fs := newFlagSet("config validate-envoy", "config validate-envoy DIR", stderr)
		if err := parseFlagsArgs(fs, args[1:], 1, 1); err != nil {
			return err
		}
		rules, err := envoy.LoadDir(fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: ok (%d files, domains: %s)\n", fs.Arg(0), len(rules.Sources()), strings.Join(rules.Domains(), ", "))
		return nil
	case "example":
		fs := newFlagSet("config example", "config example", stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		_, err := io.WriteString(stdout, config.Example)
		return err
	}
	fmt.Fprintf(stderr, "floodgate config: unknown subcommand %q\nUsage: floodgate %s\n", args[0], synopsis)
	return errUsage
}
