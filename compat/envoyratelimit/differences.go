package envoyratelimit

// Difference is a deliberate difference between floodgate and
// envoyproxy/ratelimit: an answer field in which floodgate differs on
// purpose, and why.
type Difference struct {
	// Name identifies the difference in test output and in docs/ENVOY.md.
	Name string
	// What floodgate answers instead of the peer.
	What string
	// Why floodgate does so.
	Why string
}

// Differences are the deliberate differences, the one list: the
// side-by-side test accepts these and nothing else, and docs/ENVOY.md
// repeats each Name (a test holds it to that).
var Differences = []Difference{
	{
		Name: "denied-consumes-nothing",
		What: "A request answered OVER_LIMIT is not counted: neither against the descriptor that is over, nor against the " +
			"other descriptors of the request, which keep what they had (their limit_remaining says so). The peer counts every hit " +
			"of every descriptor, so after a denial its counters run ahead of floodgate's, and its later answers show less remaining, " +
			"or OVER_LIMIT where floodgate still admits.",
		Why: "A rejected request took nothing from anyone (envoyproxy/ratelimit #427, #430): clients that retry after a 429 are " +
			"not locked out for the rest of the window by their own retries, and a request one rule denies does not use up another's quota.",
	},
	{
		Name: "over-limit-remaining",
		What: "An OVER_LIMIT status reports what is left of the quota (a request of 5 hits against 3 left reports 3); the peer reports 0.",
		Why:  "Nothing was taken, so 3 is what a smaller request can still use.",
	},
	{
		Name: "longest-wildcard-wins",
		What: "Among wildcard descriptors (value ending in '*') that match a value, the longest prefix wins; the peer takes the first in file order.",
		Why:  "The most specific rule applies, as for exact values, whatever the order the file lists them in.",
	},
	{
		Name: "negative-hits",
		What: "A descriptor with is_negative_hits gives its hits back to its counter; the peer ignores the flag and counts them.",
		Why:  "Envoy sends it to return quota (for instance for a request that turned out not to need it).",
	},
	{
		Name: "bad-files-stop-start",
		What: "A rule file floodgate cannot load stops start-up, and a broken reload keeps the rules in force, with errors naming file, line, field and value. " +
			"The peer starts anyway: it logs the first error (without a line), counts config_load_error and serves with no rules, failing every " +
			"ShouldRateLimit call with \"no rate limit configuration loaded\" (gRPC Unknown, should_rate_limit.service_error; POST /json answers 400), " +
			"which Envoy's default failure_mode_deny=false admits, while gRPC health stays SERVING unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED; " +
			"a broken reload keeps its rules in force too. Anchors, aliases and merge keys (<<) load as the peer's yaml.v2 reads them, but floodgate " +
			"refuses what yaml.v2 reads silently: a second YAML document in a file (the peer ignores it), a key written twice in one mapping (the peer takes " +
			"the last), and an own key written before a << that merges the same key (yaml.v2 takes the merged value, yaml.v3 the own one).",
		Why: "A typo never becomes a silently missing limit, nor a service that admits everything while it reports healthy.",
	},
	{
		Name: "never-fits-stats",
		What: "A descriptor whose hits exceed its whole quota (hits_addend 30 against 20 per minute) counts all its hits as over_limit in the " +
			"statistics (statsd and Prometheus); the peer counts only the hits past the quota as over_limit, and those between the near-limit " +
			"threshold and the quota as near_limit, when its counter had room.",
		Why: "Such a request can never be admitted, so floodgate answers it without asking the store, and does not know how full the counter is; " +
			"the statistics say the request was over, as its answer does.",
	},
	{
		Name: "statsd-domain-not-found",
		What: "No ratelimit.service.rate_limit.<domain>.domain_not_found statistic for requests to a domain no file configures; floodgate " +
			"counts them in floodgate_envoy_descriptors_total{domain=\"(unknown)\", outcome=\"no_rule\"}.",
		Why: "The peer names the statistic by the request's domain, so any caller can create names without bound.",
	},
	{
		Name: "requests-per-unit-required",
		What: "A rate_limit without requests_per_unit (and not unlimited) stops the load with its file and line; the peer reads it as 0 and blocks every request.",
		Why:  "A forgotten field never becomes a rule that denies everything.",
	},
	{
		Name: "invalid-descriptors",
		What: "A request descriptor without entries, or an entry without a key, is answered INVALID_ARGUMENT; the peer matches nothing and answers OK.",
		Why:  "A malformed request from a misconfigured Envoy is reported, not silently unlimited.",
	},
	{
		Name: "store-errors",
		What: "A store outage follows the rule's failure mode (by default UNAVAILABLE, as the peer's); any other store error (a script error, a key holding " +
			"something else) is INTERNAL, never admitted; the peer answers every Redis error alike.",
		Why: "Only an outage is a reason to fail open; a wrong answer from Redis must not become an admission.",
	},
	{
		Name: "quota-mode-not-asked",
		What: "A quota_mode descriptor of a request that another descriptor denies is not asked, so it counts nothing; the peer counts its hits.",
		Why:  "As for denied-consumes-nothing: a denied request takes nothing.",
	},
	{
		Name: "json-needs-content-type",
		What: "POST /json answers 415 unless the body is sent as Content-Type: application/json (curl -d needs -H 'Content-Type: application/json'); " +
			"the peer takes any content type.",
		Why: "A browser page can POST text/plain or a form to another origin without asking (no CORS preflight): with any content type, any web page " +
			"a user opens could spend limits on the HTTP API. application/json makes the browser ask first.",
	},
	{
		Name: "force-start-empty-folder",
		What: "With FORCE_START_WITHOUT_INITIAL_CONFIG, an empty or missing rule folder is a folder that did not load: every call fails with " +
			"Unknown \"no rate limit configuration loaded\" until a file loads; the peer takes it for an empty configuration and answers OK to everything.",
		Why: "A mistyped path must not become \"no limits\": without the variable floodgate refuses to start on it, and with it, Envoy's " +
			"failure_mode_deny decides, as for a folder that does not parse.",
	},
	{
		Name: "invalid-utf8-decided",
		What: "A request whose domain, descriptor keys or values hold invalid UTF-8 (Envoy copies header bytes 0x80-0xFF into descriptor values " +
			"as they are) is decided, each invalid sequence read as U+FFFD, so values that differ only in their invalid bytes share one counter. " +
			"The peer's gRPC library refuses to decode such a request and answers INTERNAL, which Envoy's default failure_mode_deny=false admits.",
		Why: "Otherwise any client passes every limit by adding one byte such as 0xFF to a header a descriptor reads.",
	},
	{
		Name: "shadow-not-in-headers",
		What: "With LIMIT_RESPONSE_HEADERS_ENABLED, RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset describe the descriptor " +
			"closest to its limit (or the last one over it) among the descriptors that are not shadow: a rule in shadow_mode or quota_mode, " +
			"and every rule under SHADOW_MODE or QUOTA_MODE, is never the one described, and an answer whose limited descriptors are all " +
			"shadow carries none of the three. The peer picks among every status with a limit, shadow ones included: a shadow 3/minute " +
			"rule over its limit gives RateLimit-Remaining: 0 on an answer that admits.",
		Why: "A shadow rule is decided, counted and logged but never limits, so it must not tell clients they are out of quota: " +
			"clients that honour the headers would back off for a rule that is not enforced, and turning shadow mode on to try a rule " +
			"would change what clients see. The same holds for floodgate's own headers in every front end.",
	},
	{
		Name: "health-follows-store",
		What: "gRPC health and GET /healthcheck answer NOT_SERVING / 500 while the store is unreachable; the peer's follow Redis only with " +
			"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true.",
		Why: "So that Envoy and a readiness probe send traffic to instances that can decide. Use /healthcheck as a readiness probe, not a liveness " +
			"probe: a liveness probe on it restarts every pod during a Redis outage, and then no rule's failure mode can answer.",
	},
}

// UnsentStats are the statsd names envoyproxy/ratelimit pushes that
// floodgate does not push, and why: Name is a pattern (path.Match, its '*'
// spanning dots too), matched against the name without its EXTRA_TAGS. The
// side-by-side test holds floodgate to push every other name the peer
// pushes (and no other), and docs/ENVOY.md repeats each Name.
var UnsentStats = []Difference{
	{
		Name: "ratelimit_server.*.response_time",
		What: "The peer sends a timer sample (|ms) per gRPC call.",
		Why: "A line per decision costs CPU per decision and a statsd server's work; the time is in " +
			"floodgate_envoy_request_duration_seconds, a Prometheus histogram.",
	},
	{
		Name: "ratelimit_server.Check.total_requests",
		What: "The peer counts every unary gRPC call by method, health checks (Check) among them; floodgate counts ShouldRateLimit only.",
		Why:  "Health checks are not rate-limit traffic; floodgate's total_requests counts the service's calls (POST /json ones too).",
	},
	{
		Name: "ratelimit.redis_pool.*",
		What: "The peer's Redis pool gauges and counters (cx_active, cx_total, cx_local_close).",
		Why: "floodgate's Redis client multiplexes every call on one pipelined connection per node: there is no pool; the store's " +
			"latency and errors are floodgate_store_* Prometheus series.",
	},
	{
		Name: "ratelimit.redis_per_second_pool.*",
		What: "The same for REDIS_PERSECOND's Redis.",
		Why:  "As for ratelimit.redis_pool.*: the per-second store's nodes are in floodgate_store_* and /readyz as \"per-second <addr>\".",
	},
	{
		Name: "ratelimit.localcache.*",
		What: "The peer's freecache statistics (with LOCAL_CACHE_SIZE_IN_BYTES).",
		Why: "floodgate's over-limit cache is another structure; its hits, entries, bytes and evictions are floodgate_overlimit_cache_* " +
			"Prometheus series, and its denials count in over_limit_with_local_cache as the peer's.",
	},
	{
		Name: "runtime.*",
		What: "The peer's file loader's statistics (load_attempts, load_failures, num_values).",
		Why:  "floodgate loads the folder itself; config_load_success and config_load_error count each load as the peer counts them.",
	},
}
