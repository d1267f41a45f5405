package main

import (
	"errors"
	"fmt"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/server"
)

// servePlan is everything `floodgate serve` checks before it opens a
// socket: the config with serve's flags applied, the policy, the listen
// addresses and the Envoy rules. `floodgate config validate` builds the
// same plan, so it accepts exactly the files serve accepts.
type servePlan struct {
	cfg    *config.Config
	policy server.Policy
	// rls says whether the Envoy rate-limit service runs: an envoy_config
	// folder, or an explicit --grpc-listen (which serves with no rules).
	rls bool
	// rules are the Envoy rules read from cfg.EnvoyConfig; nil without one
	// (or when envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG let
	// a bad folder start without rules, which warnings then say).
	rules *envoy.Rules
	// load is how the folder is read, now and on every reload.
	load envoy.LoadOptions
	// warnings are settings that work but are probably mistakes.
	warnings []string
}

// serveOverrides are serve's flags that override the config file's values,
// and those that change what the file must hold.
type serveOverrides struct {
	listen, grpcListen, envoyConfig, logFormat string
	// storeAPI (--store-api) serves the store API, for remote stores: a
	// file of store settings alone, with no rules, is then a server.
	storeAPI bool
}

// apply sets the overridden values on cfg, as they are in force.
func (o serveOverrides) apply(cfg *config.Config) {
	if o.listen != "" {
		cfg.Listen = o.listen
	}
	if o.grpcListen != "" {
		cfg.GRPCListen = o.grpcListen
	}
	if o.envoyConfig != "" {
		cfg.EnvoyConfig = o.envoyConfig
	}
	if o.logFormat != "" {
		cfg.Log.Format = o.logFormat
	}
}

// planServe loads the config at path (the built-in one if path is empty),
// applies serve's flags and checks everything serve checks before it
// starts, reporting every problem it finds together.
func planServe(path string, over serveOverrides) (*servePlan, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	return planConfig(cfg, over, nil)
}

// planConfig is planServe for a config already loaded: from a file, or
// from envoyproxy/ratelimit's environment (compat, serve --envoy-env).
func planConfig(cfg *config.Config, over serveOverrides, compat *envoyCompat) (*servePlan, error) {
	over.apply(cfg)
	p := &servePlan{cfg: cfg, warnings: cfg.Warnings()}
	if compat != nil {
		p.load = compat.load
	}
	var errs []error
	var err error
	if p.policy, err = cfg.Policy(); err != nil {
		errs = append(errs, err)
	}
	// The file's own values were checked by config.Load; a flag's value is
	// checked here, naming the flag.
	for _, f := range []struct{ flag, value string }{
		{"--listen", over.listen}, {"--grpc-listen", over.grpcListen}, {"--log-format", over.logFormat},
	} {
		if f.value == "" {
			continue
		}
		check := config.CheckListen
		if f.flag == "--log-format" {
			check = config.CheckLogFormat
		}
		if err := check(f.value); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", f.flag, f.value, err))
		}
	}
	p.rls = cfg.EnvoyConfig != "" || over.grpcListen != ""
	if p.rls && cfg.Store.Type == config.StoreMemory {
		p.warnings = append(p.warnings, "the Envoy rate-limit service decides on the in-process memory store: every replica admits the whole limit; "+
			"set store.type to redis, redis-cluster or redis-sentinel to share limits")
	}
	if over.listen != "" || over.grpcListen != "" || over.envoyConfig != "" {
		// The file's listeners were held apart by config.Load; the flags
		// may have moved one onto another's port.
		if err := cfg.ListenerClashes(p.rls); err != nil {
			errs = append(errs, fmt.Errorf("%s, with serve's flags applied: %w", cfg.Source, err))
		}
	}
	if len(cfg.Rules) == 0 && !p.rls && !over.storeAPI {
		errs = append(errs, fmt.Errorf("%s: no rules, and no envoy_config: serve would limit nothing (every check answered 404, no such rule); "+
			"add a rule under rules: (floodgate config example prints two), set envoy_config (or serve --envoy-config) to serve only Envoy's rate-limit service, "+
			"or serve only the store API for remote stores with serve --store-api (config validate --store-api)", cfg.Where("rules")))
	}
	if cfg.EnvoyConfig != "" {
		if p.rules, err = envoy.Load(cfg.EnvoyConfig, p.load); err != nil {
			where := "--envoy-config " + cfg.EnvoyConfig
			switch {
			case compat != nil && over.envoyConfig == "":
				where = compat.rulesWhere // the environment has no file or line to name
			case over.envoyConfig == "":
				where = cfg.Where("envoy_config") + ": " + cfg.EnvoyConfig
			}
			if compat != nil && compat.force {
				p.rules = nil
				p.warnings = append(p.warnings, fmt.Sprintf("%s: the Envoy rules did not load; starting without them (FORCE_START_WITHOUT_INITIAL_CONFIG): %v", where, err))
			} else {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// startWarnings are the warnings serve prints as it starts beyond the
// plan's own, for `config validate` to print too: listeners beyond
// loopback without tokens (at their configured addresses), and Redis TLS
// without hostname verification (which serve's store logs as it dials).
func (p *servePlan) startWarnings() []string {
	cfg := p.cfg
	grpcListen := ""
	if p.rls {
		grpcListen = cfg.GRPCListen
	}
	listeners, fix := configListeners(cfg.Listen, grpcListen)
	_, out := exposedWarnings(cfg.Auth.Enabled(), listeners, fix)
	for _, s := range []struct {
		store *config.Store
		name  string
	}{{&cfg.Store, "store"}, {cfg.Store.PerSecond, "store.per_second"}} {
		if s.store != nil && s.store.TLS && s.store.TLSSkipHostnameVerification {
			out = append(out, cfg.Where(s.name+".tls_skip_hostname_verification")+": TLS hostname verification is off: Redis's certificate must chain to the trusted CAs, but may name any host (docs/SECURITY.md)")
		}
	}
	return out
}
