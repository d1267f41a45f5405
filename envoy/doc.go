// Package envoy serves Envoy's global rate-limit protocol (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over any
// [floodgate.Store], with rules written in the configuration format of the
// reference service, envoyproxy/ratelimit.
//
// A gateway (Envoy, Istio, Gloo, Contour, ...) that calls envoyproxy/ratelimit
// can call this package's [Service] instead: the rule files load unchanged,
// the most specific descriptor wins as it does there, and the answers carry
// the same fields. What floodgate adds is a choice of algorithm per
// rate_limit (sliding-window log, sliding-window counter, token bucket, or
// the reference's clock-aligned fixed window), a failure mode per rule, and
// requests over the limit that consume nothing.
//
// # Rule files
//
// [Load] reads every file under a folder, as the reference's runtime loader
// does (recursively, any extension; names starting with a dot only with
// LoadOptions.DotFiles), one domain per file, and [Service.Watch] reloads
// it when it changes:
//
//	domain: messaging
//	algorithm: sliding_window_log   # floodgate: the domain's default algorithm
//	failure_mode: open              # floodgate: the domain's default failure mode
//	response_headers: true          # floodgate: rate-limit headers in the answers
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        rate_limit:
//	          unit: day             # second, minute, hour, day, week, month, year
//	          requests_per_unit: 5
//	  - key: to_number
//	    rate_limit:
//	      name: per_number
//	      unit: day
//	      requests_per_unit: 100
//	      algorithm: token_bucket   # floodgate: this rule's algorithm
//	      capacity: 20              # floodgate: the bucket's size (default requests_per_unit)
//	      failure_mode: closed      # floodgate: error (default), open or closed
//
// Everything envoyproxy/ratelimit documents is accepted with the same
// meaning: key, value (a trailing '*' matches any value with that prefix),
// nested descriptors, rate_limit with unit, requests_per_unit (0 blocks every
// request), unlimited, name and replaces, shadow_mode, detailed_metric,
// quota_mode, value_to_metric and share_threshold. Unknown keys are errors,
// as there; every error names the file, the line, the field and the value.
//
// The default algorithm is fixed_window, the reference's own: a file written
// for envoyproxy/ratelimit then admits exactly what it admitted before
// (clock-aligned windows, the same duration_until_reset), and limits in the
// millions per day keep O(1) state per key. Sliding windows and token buckets
// are one line away, per rule or per domain; see docs/ENVOY.md.
//
// # Decisions
//
// For each descriptor of a request the service finds the rule and asks the
// store about the key made of the domain and the descriptor's entries, with
// the cost given by hits_addend (the descriptor's, where 0 checks without
// counting, else the request's, where 0 means 1). A request over the limit
// on one descriptor is OVER_LIMIT overall, and whatever the other
// descriptors admitted for it is refunded, so it uses up no quota anywhere.
// Unknown domains and descriptors answer OK without a limit, as the
// reference does. See [Service.ShouldRateLimit] for every field of the
// answer. On a gRPC server built with [ServerCodec] (as [NewGRPCServer]
// builds it), invalid UTF-8 in a request's strings is decided with U+FFFD
// in its place instead of failing the call.
package envoy
