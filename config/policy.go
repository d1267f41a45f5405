package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fielderr"
	"github.com/floodgate-rl/floodgate/internal/rulecheck"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
	"github.com/floodgate-rl/floodgate/internal/yamlfield"
	"github.com/floodgate-rl/floodgate/server"
)

// Rule is one named limit, as the file writes it.
type Rule struct {
	// Name identifies the rule in the API, metrics and headers.
	Name string `yaml:"name"`
	// Algorithm is sliding_window_log, token_bucket, sliding_window_counter
	// or fixed_window.
	Algorithm string `yaml:"algorithm"`
	// Limit is the quota per window (windowed algorithms).
	Limit int64 `yaml:"limit"`
	// Window is the window length (windowed algorithms).
	Window time.Duration `yaml:"window"`
	// Capacity is the bucket size (token_bucket).
	Capacity int64 `yaml:"capacity"`
	// Refill is the bucket's refill rate such as 10/s or 1/500ms
	// (token_bucket).
	Refill string `yaml:"refill"`
	// FailureMode is open (the default: admit when the store is
	// unavailable), closed (answer 503) or local (each instance limits
	// alone at local_share or 1/instances of the limit).
	FailureMode decide.FailureMode `yaml:"failure_mode"`
	// LocalShare is the share of the limit each instance enforces alone
	// under failure_mode local, above 0 and at most 1 (0.25: a quarter).
	LocalShare float64 `yaml:"local_share"`
	// Instances is how many instances share the store: under failure_mode
	// local each enforces 1/instances of the limit. Set it or local_share.
	Instances int `yaml:"instances"`
	// LocalCache, when false, keeps the rule out of the over-limit cache:
	// every request over the limit asks the store. Absent: true.
	LocalCache *bool `yaml:"local_cache"`
	// Shadow decides and reports but never denies.
	Shadow bool `yaml:"shadow"`
	// Lease turns on leased quota (`lease: {}` for the defaults): each
	// instance takes blocks of the limit from the store and decides from
	// them in memory. A token_bucket or fixed_window only.
	Lease *Lease `yaml:"lease"`
}

// Lease tunes a rule's leased quota (decide.LeaseOptions); every key may be
// left out for its default.
type Lease struct {
	// Refresh is about how long a block lasts at the instance's rate
	// (absent: 100ms).
	Refresh time.Duration `yaml:"refresh"`
	// TTL is how long leased units may be spent after they were taken
	// (absent: ten times refresh).
	TTL time.Duration `yaml:"ttl"`
	// Idle gives back a lease unused this long (absent: five times
	// refresh).
	Idle time.Duration `yaml:"idle"`
	// MaxShare bounds a block as a fraction of the limit (absent: 0.1).
	MaxShare float64 `yaml:"max_share"`
}

// options returns the engine's lease options; nil for no lease.
func (l *Lease) options() *decide.LeaseOptions {
	if l == nil {
		return nil
	}
	return &decide.LeaseOptions{Refresh: l.Refresh, TTL: l.TTL, Idle: l.Idle, MaxShare: l.MaxShare}
}

// localShare returns the rule's local share, from local_share or
// instances (rulecheck.ShareOf), or the key that is wrong. c tells a key
// written as 0 from one left out, and a failure_mode that is written but
// did not decode (and is reported): then only the values are checked, not
// whether the mode takes them.
func (r Rule) localShare(c *Config, path string) (float64, *badKey) {
	var share *float64
	var instances *int64
	if _, written := c.lines[path+".local_share"]; written || r.LocalShare != 0 {
		share = &r.LocalShare
	}
	if _, written := c.lines[path+".instances"]; written || r.Instances != 0 {
		n := int64(r.Instances)
		instances = &n
	}
	failed := c.failed[path+".failure_mode"]
	got, err := rulecheck.ShareOf(r.FailureMode, failed, share, instances)
	var fe *fielderr.Error
	switch {
	case err == nil && failed: // a mode that did not decode takes no share
		return 0, nil
	case !errors.As(err, &fe):
		return got, nil
	}
	key := map[string]string{"LocalShare": "local_share", "Instances": "instances", "Failure": "failure_mode"}[fe.Field]
	return 0, &badKey{key, fe.Value, fe.Reason}
}

// RateLimit returns the floodgate.Limit the rule's fields describe. The
// error names a field that cannot be mapped (an unknown algorithm, a bad
// refill rate, fields of the other kind of algorithm); the limit itself is
// checked by Limit.Validate.
func (r Rule) RateLimit() (floodgate.Limit, error) {
	l, bad := r.limit()
	if bad != nil {
		return l, fmt.Errorf("%s: %s %s", bad.key, bad.value, bad.reason)
	}
	return l, nil
}

// badKey is a rule key that cannot be mapped onto a Limit.
type badKey struct{ key, value, reason string }

func (r Rule) limit() (floodgate.Limit, *badKey) {
	alg, err := floodgate.ParseAlgorithm(r.Algorithm)
	if err != nil {
		return floodgate.Limit{}, &badKey{"algorithm", fmt.Sprintf("%q", r.Algorithm), "is not one of " + strings.Join(algorithmlist.Names(), ", ")}
	}
	if alg != floodgate.TokenBucket {
		switch {
		case r.Capacity != 0:
			return floodgate.Limit{}, &badKey{"capacity", fmt.Sprint(r.Capacity), "applies to token_bucket only; use limit and window"}
		case r.Refill != "":
			return floodgate.Limit{}, &badKey{"refill", fmt.Sprintf("%q", r.Refill), "applies to token_bucket only; use limit and window"}
		}
		return floodgate.NewLimit(alg, r.Limit, r.Window), nil
	}
	switch {
	case r.Limit != 0:
		return floodgate.Limit{}, &badKey{"limit", fmt.Sprint(r.Limit), "does not apply to token_bucket; use capacity and refill"}
	case r.Window != 0:
		return floodgate.Limit{}, &badKey{"window", r.Window.String(), "does not apply to token_bucket; use capacity and refill"}
	}
	n, per, err := ParseRate(r.Refill)
	if err != nil {
		return floodgate.Limit{}, &badKey{"refill", fmt.Sprintf("%q", r.Refill), "is not a rate such as 10/s, 100/m, 5/h or 1/500ms"}
	}
	return floodgate.NewTokenBucket(r.Capacity, n, per), nil
}

// Policy returns the server policy the config describes: its rules, client
// address settings, header mode and forward-auth settings, validated by
// server.Policy.Validate and clientip.New. Errors are *FieldError, naming
// the file's path, line and value.
func (c *Config) Policy() (server.Policy, error) {
	var errs []error
	lines := c.lines
	p := server.Policy{DenyStatus: c.ForwardAuth.DenyStatus, RuleHeader: c.ForwardAuth.RuleHeader}
	if c.Headers != "" {
		mode, err := ratelimitheader.ParseMode(c.Headers)
		if err != nil {
			errs = append(errs, lines.Error("headers", c.Headers, "is not both, ietf, legacy or none"))
		}
		p.Headers = mode
	}
	ex, err := c.ClientIP.extractor(lines)
	if err != nil {
		errs = append(errs, err)
	}
	p.ClientIP = ex
	unmapped := map[int]bool{}
	for i, r := range c.Rules {
		l, bad := r.limit()
		if bad != nil {
			unmapped[i] = true
			errs = append(errs, lines.Error(yamlfield.Index("rules", i)+"."+bad.key, bad.value, bad.reason))
		}
		share, bad := r.localShare(c, yamlfield.Index("rules", i))
		if bad != nil {
			errs = append(errs, lines.Error(yamlfield.Index("rules", i)+"."+bad.key, bad.value, bad.reason))
		}
		p.Rules = append(p.Rules, server.Rule{Name: r.Name, Limit: l, Failure: r.FailureMode, LocalShare: share,
			NoCache: r.LocalCache != nil && !*r.LocalCache, Shadow: r.Shadow, Lease: r.Lease.options()})
	}
	if err := p.Validate(); err != nil {
		for _, e := range leaves(err) {
			var ce *server.ConfigError
			if !errors.As(e, &ce) {
				errs = append(errs, e)
				continue
			}
			if fe := c.policyField(ce, unmapped); fe != nil {
				errs = append(errs, fe)
			}
		}
	}
	if len(errs) > 0 {
		return server.Policy{}, errors.Join(byLine(errs)...)
	}
	return p, nil
}

// policyField translates a server.ConfigError into the file's terms; nil
// for an error already reported.
func (c *Config) policyField(ce *server.ConfigError, unmapped map[int]bool) *FieldError {
	var i int
	var field string
	if _, err := fmt.Sscanf(ce.Field, "Rules[%d].%s", &i, &field); err != nil || i < 0 || i >= len(c.Rules) {
		switch ce.Field {
		case "DenyStatus":
			return c.lines.Error("forward_auth.deny_status", ce.Value, ce.Reason)
		case "Headers":
			return c.lines.Error("headers", ce.Value, ce.Reason)
		case "RuleHeader":
			return c.lines.Error("forward_auth.rule_header", ce.Value, ce.Reason)
		}
		return c.lines.Error("", ce.Field+" "+ce.Value, ce.Reason)
	}
	r, rule := c.Rules[i], yamlfield.Index("rules", i)
	switch field {
	case "Name":
		return c.lines.Error(rule+".name", fmt.Sprintf("%q", r.Name), ce.Reason)
	case "Failure":
		return c.lines.Error(rule+".failure_mode", ce.Value, ce.Reason)
	case "LocalShare":
		if unmapped[i] {
			return nil
		}
		if r.Instances != 0 {
			return c.lines.Error(rule+".instances", fmt.Sprint(r.Instances), ce.Reason)
		}
		return c.lines.Error(rule+".local_share", ce.Value, ce.Reason)
	case "Limit":
		if unmapped[i] {
			return nil
		}
		var le *floodgate.LimitError
		if !errors.As(ce, &le) {
			return c.lines.Error(rule, ce.Value, ce.Reason)
		}
		key, value := limitKey(le.Field, &r)
		return c.lines.Error(rule+"."+key, value, le.Reason)
	case "Lease":
		if unmapped[i] {
			return nil
		}
		e := c.lines.Error(rule+".lease", "", "on "+ce.Value+" "+ce.Reason)
		e.Fix = "set algorithm: token_bucket or fixed_window, or remove lease"
		return e
	}
	if key, ok := leaseKeys[field]; ok {
		e := c.lines.Error(rule+".lease."+key, ce.Value, ce.Reason)
		e.Fix = "leave " + key + " out for its default (docs/CONFIG.md)"
		return e
	}
	return c.lines.Error(rule, ce.Value, ce.Reason)
}

// leaseKeys are the YAML keys of decide.LeaseOptions's fields.
var leaseKeys = map[string]string{"Lease.Refresh": "refresh", "Lease.TTL": "ttl", "Lease.Idle": "idle", "Lease.MaxShare": "max_share"}

// limitKey maps a floodgate.Limit field to the rule's key the user wrote,
// and its value.
func limitKey(limitField string, r *Rule) (string, string) {
	bucket := r.Algorithm == floodgate.TokenBucket.String()
	switch {
	case limitField == "Quota" && bucket:
		return "capacity", fmt.Sprint(r.Capacity)
	case limitField == "Quota":
		return "limit", fmt.Sprint(r.Limit)
	case limitField == "Window" && bucket, limitField == "Refill":
		return "refill", fmt.Sprintf("%q", r.Refill)
	case limitField == "Algorithm":
		return "algorithm", fmt.Sprintf("%q", r.Algorithm)
	}
	return "window", r.Window.String()
}

// leaves flattens errors.Join trees.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// extractor returns the client-address extractor the section describes,
// checked by clientip.New.
func (ip *ClientIP) extractor(lines yamlfield.Lines) (*clientip.Extractor, error) {
	if _, written := lines["client_ip.ipv6_prefix"]; written && ip.IPv6Prefix == 0 {
		// 0 is the library's "default"; written, it is a prefix length
		// that would put every IPv6 client in one group.
		e := lines.Error("client_ip.ipv6_prefix", "0", "must be from 1 to 128")
		e.Fix = "write 64 (the default: one group per /64, a typical subscriber's network), or remove the key"
		return nil, e
	}
	r := clientip.Resolver{TrustedProxies: ip.TrustedProxies, IPv6Prefix: ip.IPv6Prefix}
	switch strings.ToLower(ip.Header) {
	case "", "x-forwarded-for":
	case "forwarded":
		r.Header = clientip.Forwarded
	default:
		return nil, lines.Error("client_ip.header", ip.Header, "is not x-forwarded-for or forwarded")
	}
	ex, err := clientip.New(r)
	if err == nil {
		return ex, nil
	}
	var ce *clientip.ConfigError
	if !errors.As(err, &ce) {
		return nil, lines.Error("client_ip", "", err.Error())
	}
	switch {
	case strings.HasPrefix(ce.Field, "TrustedProxies"):
		return nil, lines.Error("client_ip.trusted_proxies"+strings.TrimPrefix(ce.Field, "TrustedProxies"), ce.Value, "is not a CIDR such as 10.0.0.0/8 or an IP address")
	case ce.Field == "IPv6Prefix":
		return nil, lines.Error("client_ip.ipv6_prefix", ce.Value, ce.Reason)
	}
	return nil, lines.Error("client_ip", ce.Field+" "+ce.Value, ce.Reason)
}

// byLine orders errors by their line in the file.
func byLine(errs []error) []error {
	line := func(err error) int {
		var fe *FieldError
		if errors.As(err, &fe) {
			return fe.Line
		}
		return 0
	}
	slices.SortStableFunc(errs, func(a, b error) int { return line(a) - line(b) })
	return errs
}
