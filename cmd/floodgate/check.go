package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/server"
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
	if *cost < 1 {
		return fmt.Errorf("--cost %d must be at least 1", *cost)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	policy, err := cfg.Policy()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(policy.Rules, func(r server.Rule) bool { return r.Name == *ruleName })
	if i < 0 {
		return fmt.Errorf("no rule named %q in %s", *ruleName, cfg.Source)
	}
	rule := policy.Rules[i]
	store, closeStore, err := openStore(cfg.Store)
	if err != nil {
		return err
	}
	defer closeStore()
	// The engine decides as the server does: the same store key, failure
	// mode, shadow mode and error policy.
	engine, err := decide.New(store, decide.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	res := engine.Decide(ctx, []decide.Check{{Rule: rule.Name, Key: decide.StoreKey("", rule.Name, *key),
		Limit: rule.Limit, Cost: *cost, Failure: rule.Failure, LocalShare: rule.LocalShare, Shadow: rule.Shadow}})
	o := res.Outcomes[0]
	switch res.Verdict {
	case decide.Unavailable:
		return fmt.Errorf("store unavailable, and rule %q fails closed: the server would answer 503: %w", rule.Name, res.Err())
	case decide.StoreError:
		return fmt.Errorf("store error for rule %q: the server would answer 500, whatever the failure mode: %w", rule.Name, res.Err())
	case decide.Invalid:
		return res.Err()
	}
	d := o.Decision
	if *asJSON {
		b, _ := json.Marshal(server.NewCheckResponse(rule, &res))
		fmt.Fprintln(stdout, string(b))
	} else {
		verdict := "allowed"
		switch {
		case !res.Allowed():
			verdict = "denied"
		case o.Verdict == decide.Unavailable:
			fmt.Fprintf(stdout, "allowed: store unavailable, and rule %s (%s) fails open: %v\n", rule.Name, rule.Limit, o.Err)
			return nil
		case o.Verdict == decide.Denied:
			verdict = "allowed (shadow rule: would have denied)"
		}
		fmt.Fprintf(stdout, "%s: rule %s (%s), key %q, cost %d: remaining %d, retry after %s, reset after %s\n",
			verdict, rule.Name, rule.Limit, *key, *cost, d.Remaining, d.RetryAfter, d.ResetAfter)
	}
	if !res.Allowed() {
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
