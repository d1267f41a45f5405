package server

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/floodgate-rl/floodgate/internal/rulecheck"
	"github.com/floodgate-rl/floodgate/internal/storekey"
	"golang.org/x/net/http/httpguts"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// Defaults for the zero fields of a Policy.
const (
	// DefaultDenyStatus is forward auth's status for a request over its
	// limit.
	DefaultDenyStatus = 429
	// DefaultRuleHeader is the request header forward auth reads the rule
	// from when the query names none.
	DefaultRuleHeader = "X-Floodgate-Rule"
)

// Rule is one named limit the API decides against.
type Rule struct {
	// Name identifies the rule in requests, responses, headers, metrics and
	// store keys: 1-64 letters, digits, '_', '.' or '-', starting with a
	// letter or digit, unique within a Policy.
	Name string
	// Limit is the rate limit, as a valid [floodgate.Limit].
	Limit floodgate.Limit
	// Failure says what an outage of the store means for the rule.
	Failure decide.FailureMode
	// LocalShare is the share of Limit each instance enforces alone under
	// decide.FailLocal while the store is unavailable: above 0 and at most
	// 1, 1/N for N instances (docs/RESILIENCE.md). Zero: the whole
	// limit.
	LocalShare float64
	// NoCache keeps the rule out of the engine's over-limit cache: every
	// request over the limit asks the store.
	NoCache bool
	// Lease, if set, decides the rule from quota each instance leases from
	// the store in blocks (decide.LeaseOptions): a token bucket or a fixed
	// window only.
	Lease *decide.LeaseOptions
	// Shadow makes the rule decide and report but never deny; a shadow rule
	// never appears in rate-limit headers or Retry-After.
	Shadow bool
	// Description describes the rule in GET /v1/rules. Empty: the limit's
	// String.
	Description string
}

// Policy is everything Reload replaces at once: the rules, how forward auth
// finds a client's address, and the response settings.
type Policy struct {
	// Rules are the named limits. None is valid: a server that only hosts
	// other routes (Options.Routes), such as Envoy's /json.
	Rules []Rule
	// ClientIP finds forward auth's client address. Nil: a zero
	// clientip.Resolver, which trusts no proxy.
	ClientIP *clientip.Extractor
	// Headers selects the rate-limit response headers; the zero value sends
	// both the IETF and the X-RateLimit ones.
	Headers httplimit.HeaderMode
	// DenyStatus is forward auth's status for a request over its limit, a
	// 4xx or 5xx (nginx auth_request needs 401 or 403). Zero:
	// DefaultDenyStatus.
	DenyStatus int
	// RuleHeader names the request header forward auth reads the rule from
	// when the query has no "rule". Empty: DefaultRuleHeader.
	RuleHeader string
}

// ConfigError reports a bad Policy field (or an argument of New), naming
// the field (such as "Rules[1].Name") and its value. Its Error begins with
// "server: ".
type ConfigError struct {
	Field  string // such as "Rules[1].Name"
	Value  string // the bad value, formatted
	Reason string // why it cannot be used
	// Err is the underlying error, if any (a *floodgate.LimitError for a
	// limit).
	Err error
}

// Error returns "server: ", the field, its value and the reason.
func (e *ConfigError) Error() string { return "server: " + e.Field + " " + e.Value + " " + e.Reason }

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// Validate reports every bad field of p, each as a *ConfigError, joined
// with errors.Join.
func (p *Policy) Validate() error {
	var errs []error
	bad := func(field, value, reason string, err error) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason, Err: err})
	}
	seen := make(map[string]int, len(p.Rules))
	for i, r := range p.Rules {
		field := func(f string) string { return fmt.Sprintf("Rules[%d].%s", i, f) }
		if reason := rulecheck.RuleName(r.Name); reason != "" {
			bad(field("Name"), strconv.Quote(r.Name), reason, nil)
		} else if prev, dup := seen[r.Name]; dup {
			bad(field("Name"), strconv.Quote(r.Name), fmt.Sprintf("is already the name of the rule at index %d", prev), nil)
		} else {
			seen[r.Name] = i
		}
		for _, e := range rulecheck.Rule(r.Limit, r.Failure, r.LocalShare) {
			bad(field(e.Field), e.Value, e.Reason, e.Err)
		}
		if e := rulecheck.Lease(r.Limit, r.Lease); e != nil {
			bad(field(e.Field), e.Value, e.Reason, nil)
		}
	}
	if p.Headers > httplimit.HeadersNone {
		bad("Headers", p.Headers.String(), "is not a HeaderMode", nil)
	}
	if p.DenyStatus != 0 && (p.DenyStatus < 400 || p.DenyStatus > 599) {
		bad("DenyStatus", strconv.Itoa(p.DenyStatus), "must be a 4xx or 5xx status such as 429, 401 or 403", nil)
	}
	if p.RuleHeader != "" && !httpguts.ValidHeaderFieldName(p.RuleHeader) {
		bad("RuleHeader", strconv.Quote(p.RuleHeader), "is not a header field name: letters, digits and !#$%&'*+-.^_`|~ only, no spaces or colons, such as "+DefaultRuleHeader, nil)
	}
	return errors.Join(errs...)
}

// policy is a validated Policy, ready to serve.
type policy struct {
	rules      map[string]*rule
	ordered    []*rule
	clientIP   *clientip.Extractor
	headers    httplimit.HeaderMode
	denyStatus int
	ruleHeader string
}

// rule is a Rule prepared for deciding.
type rule struct {
	Rule
	policy ratelimitheader.Policy // the rule's header pieces
	keys   storekey.Space         // its store keys, in the empty namespace
}

func newPolicy(p Policy) (*policy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out := &policy{
		rules:      make(map[string]*rule, len(p.Rules)),
		clientIP:   p.ClientIP,
		headers:    p.Headers,
		denyStatus: p.DenyStatus,
		ruleHeader: p.RuleHeader,
	}
	if out.clientIP == nil {
		out.clientIP, _ = clientip.New(clientip.Resolver{}) // the zero Resolver is valid
	}
	if out.denyStatus == 0 {
		out.denyStatus = DefaultDenyStatus
	}
	if out.ruleHeader == "" {
		out.ruleHeader = DefaultRuleHeader
	}
	for i, r := range p.Rules {
		pol, err := ratelimitheader.ForLimit(r.Name, r.Limit)
		if err != nil { // a valid name is a Structured Fields String
			return nil, &ConfigError{Field: fmt.Sprintf("Rules[%d].Name", i), Value: strconv.Quote(r.Name), Reason: "cannot be serialized", Err: err}
		}
		if r.Description == "" {
			r.Description = r.Limit.String()
		}
		rl := &rule{Rule: r, policy: pol, keys: storekey.NewSpace("", r.Name)}
		out.rules[r.Name] = rl
		out.ordered = append(out.ordered, rl)
	}
	return out, nil
}

// Check is the engine's check of a request for key at cost under r, as the
// server decides it: its store key is the rule's name, escaped, '|' and
// key, the scheme of every front end, and the rule's failure mode, local share, cache and shadow settings come
// with it. `floodgate check` and `floodgate bench --rule` decide with it,
// so they read and write the keys the server does.
func (r Rule) Check(key string, cost int64) decide.Check {
	return r.checkIn(storekey.NewSpace("", r.Name), key, cost)
}

// checkIn is Check with the rule's key space already made.
func (r *Rule) checkIn(keys storekey.Space, key string, cost int64) decide.Check {
	return decide.Check{Rule: r.Name, Key: keys.Key(key), Limit: r.Limit, Cost: cost,
		Failure: r.Failure, LocalShare: r.LocalShare, NoCache: r.NoCache, Shadow: r.Shadow, Lease: r.Lease}
}

// check is Rule.Check, with the key space made once when the rule was
// loaded.
func (rl *rule) check(key string, cost int64) decide.Check {
	return rl.Rule.checkIn(rl.keys, key, cost)
}
