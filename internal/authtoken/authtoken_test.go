package authtoken_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/authtoken"
)

func TestAuthorize(t *testing.T) {
	set, err := authtoken.Parse("a decide 3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b\nb admin,metrics 8d2e6a0c4f1b9e7d3a5c8f2e6b0d4a1c", "test")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		header string
		need   authtoken.Scope
		name   string
		err    error
	}{
		{"Bearer 3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b", authtoken.ScopeDecide, "a", nil},
		{"BEARER   3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b  ", authtoken.ScopeDecide, "a", nil},
		{"Bearer 8d2e6a0c4f1b9e7d3a5c8f2e6b0d4a1c", authtoken.ScopeAdmin | authtoken.ScopeMetrics, "b", nil},
		{"Bearer 8d2e6a0c4f1b9e7d3a5c8f2e6b0d4a1c", authtoken.ScopeDecide, "b", authtoken.ErrForbidden},
		{"Bearer 3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3", authtoken.ScopeDecide, "", authtoken.ErrInvalid}, // a prefix
		{"Bearer 3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b0", authtoken.ScopeDecide, "", authtoken.ErrInvalid},
		{"Bearer ", authtoken.ScopeDecide, "", authtoken.ErrMissing},
		{"3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b", authtoken.ScopeDecide, "", authtoken.ErrMissing},
		{"Basic 3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b", authtoken.ScopeDecide, "", authtoken.ErrMissing},
		{"", authtoken.ScopeDecide, "", authtoken.ErrMissing},
	}
	for _, c := range cases {
		name, err := set.Authorize(c.header, c.need)
		if name != c.name || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("Authorize(%q, %s) = %q, %v; want %q, %v", c.header, c.need, name, err, c.name, c.err)
		}
	}
	var none *authtoken.Set
	if _, err := none.Authorize("Bearer 3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b", authtoken.ScopeDecide); !errors.Is(err, authtoken.ErrInvalid) {
		t.Errorf("nil set: %v", err)
	}
}

func TestScopeNames(t *testing.T) {
	s, err := authtoken.ParseScope("metrics,decide")
	if err != nil || s != authtoken.ScopeDecide|authtoken.ScopeMetrics || s.String() != "decide,metrics" {
		t.Fatalf("%v %q %v", s, s, err)
	}
	if _, err := authtoken.ParseScope("decide,"); err == nil {
		t.Fatal("an empty scope parsed")
	}
}

func TestWeakTokens(t *testing.T) {
	for _, c := range []struct {
		token string
		weak  string // a part of the reason; "" for a fit token
	}{
		{"3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b", ""},                             // openssl rand -hex 16
		{"3F9C2A7E1B5D8C4A6E0F2B9D7C1A5E3B", ""},                             // the same in capitals
		{"Zs0f2k8Lq1Xc7Vb3Nm9Pw4", ""},                                       // 22 base64 characters
		{"3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3", "124 bits"},                      // 31 hex digits
		{"decide-4f1c2a9b7e6d5c3a", "under 128"},                             // a word and 16 hex digits
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ""},  // long enough by the estimate
		{"----------------------------------------", "0 bits"},               // one character over and over
		{"0123456789012345678901234567890123456789", ""},                     // 40 digits: 132 bits
		{"replace-me-ops-token-openssl-rand-hex-32", "placeholder"},          // deploy/kubernetes/secret.yaml's
		{"REPLACE-ME-ingress-token-openssl-rand-hex-32", "placeholder"},      // in any case
		{"changeme-3f9c2a7e1b5d8c4a6e0f2b9d7c1a5e3b7c1a5e3b", "placeholder"}, //
		{"short", "shorter than 16"},                                         //
	} {
		got := authtoken.Weak(c.token)
		if (c.weak == "") != (got == "") || !strings.Contains(got, c.weak) {
			t.Errorf("Weak(%q) = %q, want %q", c.token, got, c.weak)
		}
	}
}

func TestParseRefusesWeakTokens(t *testing.T) {
	_, err := authtoken.Parse("ops admin replace-me-ops-token-openssl-rand-hex-32\n", "tokens")
	if err == nil || !strings.Contains(err.Error(), `tokens:1: token "ops" is a placeholder`) || strings.Contains(err.Error(), "replace-me-ops") {
		t.Fatalf("the placeholder: %v", err)
	}
}
