package authtoken_test

import (
	"errors"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/authtoken"
)

func TestAuthorize(t *testing.T) {
	set, err := authtoken.Parse("a decide aaaaaaaaaaaaaaaa\nb admin,metrics bbbbbbbbbbbbbbbb", "test")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		header string
		need   authtoken.Scope
		name   string
		err    error
	}{
		{"Bearer aaaaaaaaaaaaaaaa", authtoken.ScopeDecide, "a", nil},
		{"BEARER   aaaaaaaaaaaaaaaa  ", authtoken.ScopeDecide, "a", nil},
		{"Bearer bbbbbbbbbbbbbbbb", authtoken.ScopeAdmin | authtoken.ScopeMetrics, "b", nil},
		{"Bearer bbbbbbbbbbbbbbbb", authtoken.ScopeDecide, "b", authtoken.ErrForbidden},
		{"Bearer aaaaaaaaaaaaaaa", authtoken.ScopeDecide, "", authtoken.ErrInvalid}, // a prefix
		{"Bearer aaaaaaaaaaaaaaaaa", authtoken.ScopeDecide, "", authtoken.ErrInvalid},
		{"Bearer ", authtoken.ScopeDecide, "", authtoken.ErrMissing},
		{"aaaaaaaaaaaaaaaa", authtoken.ScopeDecide, "", authtoken.ErrMissing},
		{"Basic aaaaaaaaaaaaaaaa", authtoken.ScopeDecide, "", authtoken.ErrMissing},
		{"", authtoken.ScopeDecide, "", authtoken.ErrMissing},
	}
	for _, c := range cases {
		name, err := set.Authorize(c.header, c.need)
		if name != c.name || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("Authorize(%q, %s) = %q, %v; want %q, %v", c.header, c.need, name, err, c.name, c.err)
		}
	}
	var none *authtoken.Set
	if _, err := none.Authorize("Bearer aaaaaaaaaaaaaaaa", authtoken.ScopeDecide); !errors.Is(err, authtoken.ErrInvalid) {
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
