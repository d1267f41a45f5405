package envoy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3" // the filter's types, for Any
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"                             // HttpRequestHeaderMatchInput
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestQuotaFilterConfig: the rate_limit_quota filter configuration in
// docs/ENVOY.md parses into Envoy's proto and passes its validation.
func TestQuotaFilterConfig(t *testing.T) {
	doc, err := os.ReadFile("../docs/ENVOY.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- rlqs-filter-config -->\n```yaml\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/ENVOY.md has no yaml block after <!-- rlqs-filter-config -->")
	}
	var filter struct {
		Name        string         `yaml:"name"`
		TypedConfig map[string]any `yaml:"typed_config"`
	}
	if err := yaml.Unmarshal([]byte(block), &filter); err != nil {
		t.Fatal(err)
	}
	validateProto(t, "the filter's typed_config", filter.TypedConfig)
	// The bucket settings are an Any inside the matcher, which the
	// filter's own validation does not open.
	action := dig(t, filter.TypedConfig, "bucket_matchers", "on_no_match", "action", "typed_config")
	validateProto(t, "the bucket settings", action)
	if filter.Name != "envoy.filters.http.rate_limit_quota" {
		t.Errorf("filter name %q", filter.Name)
	}
}

// validateProto checks that v, a typed_config as YAML decodes it, is an Envoy
// proto that passes its validation.
func validateProto(t *testing.T, what string, v map[string]any) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var a anypb.Any
	if err := protojson.Unmarshal(js, &a); err != nil {
		t.Fatalf("%s is not Envoy's proto: %v", what, err)
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	val, ok := m.(interface{ ValidateAll() error })
	if !ok {
		t.Fatalf("%T has no validation", m)
	}
	if err := val.ValidateAll(); err != nil {
		t.Errorf("%s fails Envoy's validation: %v", what, err)
	}
}

// dig walks v down the keys.
func dig(t *testing.T, v map[string]any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		next, ok := v[k].(map[string]any)
		if !ok {
			t.Fatalf("no %s in the filter configuration", k)
		}
		v = next
	}
	return v
}
