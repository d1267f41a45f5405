package envoy

import (
	"time"

	"github.com/floodgate-rl/floodgate/internal/yamlfield"
)

// fileYAML is a rule file as written: envoyproxy/ratelimit's keys, and
// floodgate's (algorithm, failure_mode, local_share, instances,
// response_headers, lease). The fields' order is the order error messages list
// the keys in. Booleans are YAML 1.1's, as yaml.v2 reads them for the
// reference; values that the checks after Decode report on are Scalars,
// for their text and line.
type fileYAML struct {
	Domain          string                    `yaml:"domain"`
	Descriptors     descriptorsYAML           `yaml:"descriptors"`
	Algorithm       yamlfield.Scalar[string]  `yaml:"algorithm"`
	FailureMode     yamlfield.Scalar[string]  `yaml:"failure_mode"`
	LocalShare      yamlfield.Scalar[float64] `yaml:"local_share"`
	Instances       yamlfield.Scalar[int64]   `yaml:"instances"`
	ResponseHeaders yamlfield.Bool11          `yaml:"response_headers"`
}

// descriptorsYAML is a list of descriptors; an item written empty is nil.
type descriptorsYAML []*descriptorYAML

// Name names the list in Decode's errors.
func (descriptorsYAML) Name() string { return "a list of descriptors" }

// descriptorYAML is one descriptor as written.
type descriptorYAML struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *rateLimitYAML   `yaml:"rate_limit"`
	Descriptors    descriptorsYAML  `yaml:"descriptors"`
	ShadowMode     yamlfield.Bool11 `yaml:"shadow_mode"`
	DetailedMetric yamlfield.Bool11 `yaml:"detailed_metric"`
	QuotaMode      yamlfield.Bool11 `yaml:"quota_mode"`
	ValueToMetric  yamlfield.Bool11 `yaml:"value_to_metric"`
	ShareThreshold yamlfield.Bool11 `yaml:"share_threshold"`
}

// rateLimitYAML is one rate_limit block as written. Values that the
// checks after Decode report on are Scalars, for their text and line;
// the numbers written empty are errors, not 0.
type rateLimitYAML struct {
	Unit            yamlfield.Scalar[string]  `yaml:"unit"`
	RequestsPerUnit yamlfield.Scalar[uint32]  `yaml:"requests_per_unit,notnull"`
	Unlimited       yamlfield.Bool11          `yaml:"unlimited"`
	Name            string                    `yaml:"name"`
	Replaces        replacesYAML              `yaml:"replaces"`
	Algorithm       yamlfield.Scalar[string]  `yaml:"algorithm"`
	Capacity        yamlfield.Scalar[uint32]  `yaml:"capacity,notnull"`
	FailureMode     yamlfield.Scalar[string]  `yaml:"failure_mode"`
	LocalShare      yamlfield.Scalar[float64] `yaml:"local_share"`
	Instances       yamlfield.Scalar[int64]   `yaml:"instances"`
	Lease           *leaseYAML                `yaml:"lease"`
}

// leaseYAML is a rate_limit's lease (floodgate's key, as in its own
// config): `lease: {}` for the defaults.
type leaseYAML struct {
	Refresh  time.Duration `yaml:"refresh"`
	TTL      time.Duration `yaml:"ttl"`
	Idle     time.Duration `yaml:"idle"`
	MaxShare float64       `yaml:"max_share"`
}

// replacesYAML is a replaces list; an item written empty is nil.
type replacesYAML []*struct {
	Name string `yaml:"name"`
}

// Name names the list in Decode's errors.
func (replacesYAML) Name() string { return "a list of {name: ...}" }

// shares returns the domain's failure_mode, local_share and instances.
func (f *fileYAML) shares() shareKeys {
	return shareKeys{mode: f.FailureMode, share: f.LocalShare, instances: f.Instances}
}

// shares returns the rate_limit's failure_mode, local_share and
// instances, written at path.
func (rl *rateLimitYAML) shares(path string) shareKeys {
	return shareKeys{path: path, mode: rl.FailureMode, share: rl.LocalShare, instances: rl.Instances}
}
