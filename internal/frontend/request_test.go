package frontend_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/internal/frontend"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestFrontDecide: the one request loop of the library front ends checks
// the rules that apply and have a key, in order, past the inline buffers
// too; a key function's error becomes the check's Err; no rule that
// applies admits without a decision.
func TestFrontDecide(t *testing.T) {
	errKey := errors.New("no key")
	var rules []frontend.Rule
	for i := range frontend.MaxInline + 4 {
		rules = append(rules, frontend.Rule{Name: fmt.Sprintf("r%d", i), Limit: floodgate.PerMinute(1)})
	}
	front, err := frontend.New(frontend.Library{Store: memory.New(), Rules: rules, Options: decide.Options{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		applies   func(int) bool
		key       func(int) (string, error)
		wantRules []int
		verdict   decide.Verdict
	}{
		{"none applies", func(int) bool { return false }, nil, nil, decide.Admitted},
		{"no keys", func(int) bool { return true }, func(int) (string, error) { return "", nil }, nil, decide.Admitted},
		{"odd rules", func(i int) bool { return i%2 == 1 }, func(i int) (string, error) { return "k", nil }, []int{1, 3, 5, 7, 9, 11}, decide.Admitted},
		{"every rule, past the buffers", func(int) bool { return true }, func(int) (string, error) { return "k", nil },
			[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, decide.Denied}, // the odd ones took their one
		{"a key error", func(i int) bool { return i == 2 }, func(int) (string, error) { return "", errors.New("no header") }, []int{2}, decide.Admitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q frontend.Request
			d := front.Decide(t.Context(), &q, errKey, tc.applies, tc.key)
			if !slices.Equal(d.Rules, tc.wantRules) || len(d.Policies) != len(d.Rules) || len(d.Checks) != len(d.Rules) {
				t.Fatalf("rules %v, %d policies, %d checks; want rules %v", d.Rules, len(d.Policies), len(d.Checks), tc.wantRules)
			}
			for j, i := range d.Rules {
				if d.Checks[j].Rule != rules[i].Name || d.Policies[j] != &front.Rules[i].Policy {
					t.Errorf("check %d is rule %q with policy %p, want %q and %p", j, d.Checks[j].Rule, d.Policies[j], rules[i].Name, &front.Rules[i].Policy)
				}
				if c := d.Checks[j]; c.Err != nil && !errors.Is(c.Err, errKey) {
					t.Errorf("check %d's Err %v does not wrap ErrKey", j, c.Err)
				}
			}
			if d.Verdict != tc.verdict {
				t.Errorf("verdict %v, want %v", d.Verdict, tc.verdict)
			}
		})
	}
}
