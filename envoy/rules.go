package envoy

import (
	"slices"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// DefaultAlgorithm is the algorithm of a rate_limit that names none, in a
// file whose domain names none: the reference's clock-aligned fixed window,
// so files written for envoyproxy/ratelimit admit what they admitted there.
const DefaultAlgorithm = floodgate.FixedWindow

// units are the rate_limit units, shortest first, named as their RLS enum
// values in lower case. The lengths are the reference's: a month is 30 days
// and a year 365.
var units = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, day},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * day},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * day},
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * day},
}

const day = 24 * time.Hour

// UnitDuration returns the length of an RLS unit (a month is 30 days, a
// year 365, as in envoyproxy/ratelimit), or 0 for UNKNOWN.
func UnitDuration(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, x := range units {
		if x.unit == u {
			return x.d
		}
	}
	return 0
}

// parseUnit returns the unit named s in any case, such as "minute".
func parseUnit(s string) (rlsv3.RateLimitResponse_RateLimit_Unit, time.Duration, bool) {
	for _, x := range units {
		if strings.EqualFold(s, x.unit.String()) {
			return x.unit, x.d, true
		}
	}
	return 0, 0, false
}

// unitNames lists the units for error messages, in upper case as the RLS
// enum names them or in lower case as rule files do.
func unitNames(upper bool) []string {
	names := make([]string, len(units))
	for i, x := range units {
		names[i] = x.unit.String()
		if !upper {
			names[i] = strings.ToLower(names[i])
		}
	}
	return names
}

// Rule is one configured rate_limit, compiled. Rules are immutable and safe
// to share between goroutines.
type Rule struct {
	// Domain is the file's domain.
	Domain string
	// Key is the rule's path as envoyproxy/ratelimit names it in its
	// statistics: the domain and each descriptor's key (key_value when the
	// descriptor has a value), joined with dots, such as
	// "messaging.message_type_marketing.to_number".
	Key string
	// Name is the rate_limit's name, which replaces entries refer to. It is
	// the answer's current_limit.name, empty when the file sets none, as in
	// the reference.
	Name string
	// Replaces lists the names of the rules this one replaces when both
	// apply to one request.
	Replaces []string
	// Unlimited rules answer OK without asking the store.
	Unlimited bool
	// RequestsPerUnit and Unit are the limit as written; they are reported
	// in each answer's current_limit. RequestsPerUnit 0 denies every request.
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	// Limit is what the store decides with. It is the zero Limit when the
	// rule is Unlimited or RequestsPerUnit is 0.
	Limit floodgate.Limit
	// ShadowMode rules decide and report but always answer OK.
	ShadowMode bool
	// QuotaMode rules (the descriptor's quota_mode, or the Service's
	// Options.QuotaMode) never make a request OVER_LIMIT: over their quota
	// they answer OK with current_limit and limit_remaining, and the
	// descriptor's index is listed in the dynamic metadata's
	// quotaModeViolations (Options.DynamicMetadata), as in the reference.
	// To the engine they are shadow checks.
	QuotaMode bool
	// DetailedMetric labels the rule's metrics with the request's values
	// rather than the configured ones.
	DetailedMetric bool
	// FailureMode is what an outage of the store means for the rule, from
	// its failure_mode or else its domain's: FailOpen answers OK for the
	// descriptor; FailClosed answers OVER_LIMIT; FailError (failure_mode
	// error, the default) fails the whole call with UNAVAILABLE; FailLocal
	// decides alone at LocalShare. When neither the rule nor its domain sets
	// failure_mode, it holds the default, error, and the Service's
	// Options.FailureMode applies instead. Shadow rules always fail open.
	FailureMode decide.FailureMode
	// LocalShare is the share of the limit this instance enforces alone
	// while the store is unavailable, under FailureMode FailLocal: the
	// rule's local_share or 1/instances, or else its domain's.
	LocalShare float64
	// Lease, from the rate_limit's lease (a floodgate key), decides the
	// rule from quota this instance leases from the store in blocks
	// (decide.LeaseOptions). Nil: a store call per request.
	Lease *decide.LeaseOptions
	// Source is where the rule was written: "file:line".
	Source string

	levels     []level                // the descriptor path, one level per entry
	shared     bool                   // a level is a share_threshold wildcard
	toMetric   bool                   // a level has value_to_metric
	failureSet bool                   // failure_mode is the file's, not the default
	policy     ratelimitheader.Policy // the rule's header pieces
	policyErr  error                  // the name cannot be a header value
	override   bool                   // a request's limit override: its policy is compiled when needed
}

// level is one configured descriptor on a rule's path: its key, its value
// as written ("" for a key-only descriptor, "prefix*" for a wildcard), its
// value_to_metric, and for a share_threshold wildcard the pattern every
// matching value shares a counter under.
type level struct {
	key, value string
	toMetric   bool
	share      string
}

// Shared returns the share_threshold pattern of the rule's descriptor at
// level (0 for the first entry), such as "files/*", or "" when that
// descriptor does not share: every value its wildcard matches counts under
// the pattern, as one counter.
func (r *Rule) Shared(level int) string {
	if level < 0 || level >= len(r.levels) {
		return ""
	}
	return r.levels[level].share
}

// setLevels records the rule's descriptor path.
func (r *Rule) setLevels(levels []level) {
	r.levels = levels
	for _, l := range levels {
		r.shared = r.shared || l.share != ""
		r.toMetric = r.toMetric || l.toMetric
	}
}

// setFailure sets the rule's failure mode.
func (r *Rule) setFailure(f failure) {
	if !f.set {
		f = errorMode
	}
	r.FailureMode, r.LocalShare, r.failureSet = f.mode, f.share, f.set
}

// compilePolicy serializes the rule's RateLimit-Policy member: q is the
// quota (the capacity for a token bucket, 0 for a rule that blocks
// everything), w the window (for a token bucket the time to refill it).
func (r *Rule) compilePolicy() {
	if r.Unlimited {
		return
	}
	if r.blocked() {
		r.policy, r.policyErr = ratelimitheader.NewPolicy(r.policyName(), 0, ratelimitheader.CeilSeconds(UnitDuration(r.Unit)))
		return
	}
	r.policy, r.policyErr = ratelimitheader.ForLimit(r.policyName(), r.Limit)
}

// blocked reports whether the rule denies every request (requests_per_unit
// 0, which the reference documents as a way to block a value).
func (r *Rule) blocked() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// policyName names the rule in headers: its name, else its key.
func (r *Rule) policyName() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Key
}

// Rules is a loaded set of domains, from [LoadDir] or [Parse]. It is
// immutable and safe for concurrent use; a Service swaps whole Rules to
// reload.
type Rules struct {
	domains map[string]*domain
	sources []string
	skipped []string
	hash    [32]byte // of the files Load read; zero for Parse's
}

// domain is one file's compiled descriptor tree.
type domain struct {
	name    string
	source  string
	root    keyTable
	alg     floodgate.Algorithm // the domain's default algorithm
	failure failure             // the domain's failure_mode
	headers bool                // response_headers: add rate-limit headers to answers
	keys    keySpace            // the store keys of the domain's descriptors
}

// keyTable is one level of the tree: the configured descriptors by key.
type keyTable map[string]*keyNode

// keyNode holds the descriptors of one key at one level, by how they match a
// value: exactly, by wildcard prefix (longest first), or any value.
type keyNode struct {
	exact     map[string]*node
	wildcards []*node
	any       *node
}

// node is one configured descriptor.
type node struct {
	prefix   string // wildcard descriptors: the value without its '*'
	rule     *Rule  // nil without a rate_limit block
	children keyTable
	line     int
}

// Domains returns the configured domains, sorted.
func (r *Rules) Domains() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.domains))
	for d := range r.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Sources returns the files the rules were read from, in load order.
func (r *Rules) Sources() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.sources)
}

// Skipped returns what [Load] did not read: names starting with a dot
// (unless LoadOptions.DotFiles), links to folders and files outside
// LoadOptions.Prefix, in walk order.
func (r *Rules) Skipped() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.skipped)
}

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key, Value string
}

// Match returns the rule the reference service would apply to a descriptor
// with the given entries in domain, or nil (an unknown domain, no matching
// descriptor, or one without a rate_limit). The descriptor tree is walked
// one entry per level; at each level the most specific configured
// descriptor wins: the same key and value, then a wildcard value whose
// prefix the value starts with (the longest prefix first), then the key
// alone. A rule applies only if it sits at the level of the last entry: a
// request with more or fewer entries than the configured nesting matches
// nothing.
func (r *Rules) Match(domainName string, entries []Entry) *Rule {
	if r == nil {
		return nil
	}
	d := r.domains[domainName]
	if d == nil {
		return nil
	}
	return d.match(len(entries), func(i int) (string, string) { return entries[i].Key, entries[i].Value })
}

// match walks the tree for n entries given by at.
func (d *domain) match(n int, at func(i int) (key, value string)) *Rule {
	table := d.root
	for i := range n {
		k, v := at(i)
		next := table.lookup(k, v)
		if next == nil {
			return nil
		}
		if i == n-1 {
			return next.rule
		}
		if len(next.children) == 0 {
			return nil
		}
		table = next.children
	}
	return nil
}

// lookup finds the most specific descriptor for one entry at one level.
func (t keyTable) lookup(key, value string) *node {
	kn := t[key]
	if kn == nil {
		return nil
	}
	if n := kn.exact[value]; n != nil {
		return n
	}
	for _, n := range kn.wildcards {
		if strings.HasPrefix(value, n.prefix) {
			return n
		}
	}
	return kn.any
}
