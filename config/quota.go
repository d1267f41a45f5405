package config

import (
	"fmt"
	"time"
)

// EnvoyQuota configures the Rate Limit Quota Service (Envoy's
// rate_limit_quota filter) on grpc_listen; see docs/ENVOY.md. It maps onto
// envoy.QuotaOptions.
type EnvoyQuota struct {
	// Interval is how often the replicas share, which the filter's
	// reporting_interval should match (default 1s).
	Interval time.Duration `yaml:"interval"`
	// TTL is each assignment's assignment_time_to_live: whole seconds,
	// longer than two intervals (default three intervals, rounded up).
	TTL time.Duration `yaml:"ttl"`
	// Idle abandons a bucket an Envoy reported no use of for this long
	// (default 1m).
	Idle time.Duration `yaml:"idle"`
	// Unmatched is the answer for a bucket no rule matches: allow_all
	// (default), deny_all or abandon.
	Unmatched string `yaml:"unmatched"`
	// MaxBuckets bounds the buckets of one stream (default 1000).
	MaxBuckets int `yaml:"max_buckets"`
	// MaxBucketIDBytes bounds a bucket id's keys and values (default 1024).
	MaxBucketIDBytes int `yaml:"max_bucket_id_bytes"`
}

// checkQuota checks envoy_quota.
func (c *Config) checkQuota() []error {
	var errs []error
	q := c.EnvoyQuota
	bad := func(field, value, reason string) {
		errs = append(errs, c.lines.Error("envoy_quota."+field, value, reason))
	}
	interval := q.Interval
	if interval == 0 {
		interval = time.Second
	}
	switch {
	case q.Interval < 0 || q.Interval > 0 && q.Interval < 10*time.Millisecond:
		bad("interval", q.Interval.String(), "must be at least 10ms (default 1s; match the filter's reporting_interval)")
	case q.Interval%(4*time.Microsecond) != 0:
		bad("interval", q.Interval.String(), fmt.Sprintf("must be a whole number of 4µs (it is shared in four rounds of whole microseconds); try %v", q.Interval.Truncate(time.Millisecond)))
	}
	if q.TTL != 0 && (q.TTL%time.Second != 0 || q.TTL <= 2*interval) {
		bad("ttl", q.TTL.String(), fmt.Sprintf("must be a whole number of seconds longer than two intervals (%v): Envoy applies whole seconds only; try %v", 2*interval, (3*interval+time.Second-1)/time.Second*time.Second))
	}
	if q.Idle != 0 && q.Idle < 2*interval {
		bad("idle", q.Idle.String(), fmt.Sprintf("must be at least two intervals (%v)", 2*interval))
	}
	switch q.Unmatched {
	case "", "allow_all", "deny_all", "abandon":
	default:
		bad("unmatched", q.Unmatched, "is not allow_all, deny_all or abandon")
	}
	if q.MaxBuckets < 0 {
		bad("max_buckets", fmt.Sprint(q.MaxBuckets), "must be positive (0 or absent: 1000)")
	}
	if q.MaxBucketIDBytes < 0 {
		bad("max_bucket_id_bytes", fmt.Sprint(q.MaxBucketIDBytes), "must be positive (0 or absent: 1024)")
	}
	return errs
}
