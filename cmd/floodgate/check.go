package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
)

// errDenied makes `floodgate check` exit non-zero when the request is over
// its limit, so shell scripts can branch on it.
var errDenied = errors.New("denied")

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", "check [--config FILE] --rule NAME --key KEY [--cost N]", stderr)
	cfgPath := fs.String("config", "", "YAML config `file` naming the store and rules (default: the built-in example on the memory store)")
	ruleName := fs.String("rule", "", "rule `name` to decide against")
	key := fs.String("key", "", "the `key` to limit (any bytes)")
	cost := fs.Int64("cost", 1, "request `cost`")
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *ruleName == "" {
		fmt.Fprintln(stderr, "floodgate check: --rule is required")
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	rule, ok := cfg.Rule(*ruleName)
	if !ok {
		return fmt.Errorf("no rule named %q in %s", *ruleName, cfg.Source)
	}
	store, closeStore, err := openStore(ctx, cfg.Store)
	if err != nil {
		return err
	}
	defer closeStore()
	d, err := store.AllowN(ctx, decide.StoreKey("", rule.Name, *key), rule.RateLimit(), *cost)
	if err != nil {
		if errors.Is(err, floodgate.ErrStoreUnavailable) {
			mode := "denied"
			if rule.FailOpen() {
				mode = "allowed"
			}
			return fmt.Errorf("store unavailable (rule %q fails %s, so a server would have %s it): %w", rule.Name, rule.FailureMode, mode, err)
		}
		return err
	}
	if *asJSON {
		b, _ := json.Marshal(map[string]any{
			"allowed": d.Allowed, "limit": d.Limit, "remaining": d.Remaining,
			"retry_after_ms": d.RetryAfter.Milliseconds(), "reset_after_ms": d.ResetAfter.Milliseconds(),
		})
		fmt.Fprintln(stdout, string(b))
	} else {
		verdict := "allowed"
		if !d.Allowed {
			verdict = "denied"
		}
		fmt.Fprintf(stdout, "%s: rule %s (%s), key %q, cost %d: remaining %d, retry after %s, reset after %s\n",
			verdict, rule.Name, rule.RateLimit(), *key, *cost, d.Remaining, d.RetryAfter, d.ResetAfter)
	}
	if !d.Allowed {
		return errDenied
	}
	return nil
}

func runConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	const synopsis = "config validate FILE | config example"
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprintf(stderr, "Usage: floodgate %s\n\n  validate FILE  check a config file; errors name the line, field and value\n  example        print the built-in example config\n", synopsis)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "validate":
		fs := newFlagSet("config validate", "config validate FILE", stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			fs.Usage()
			return errUsage
		}
		cfg, err := config.Load(fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: ok (%d rules, store %s)\n", fs.Arg(0), len(cfg.Rules), cfg.Store.String())
		return nil
	case "example":
		_, err := io.WriteString(stdout, config.Example)
		return err
	}
	fmt.Fprintf(stderr, "floodgate config: unknown subcommand %q\nUsage: floodgate %s\n", args[0], synopsis)
	return errUsage
}
