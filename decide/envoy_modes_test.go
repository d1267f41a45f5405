package decide_test

import (
	"errors"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/memory"
)

// TestNeverAdmissible: a Blocked check and a cost above the quota under
// OverQuotaDenies deny the request before the store is asked, so it takes
// nothing; as shadow checks they would deny and never do; a check-only
// Blocked check admits. An invalid cost still comes first.
func TestNeverAdmissible(t *testing.T) {
	l := floodgate.PerMinute(5)
	for _, tc := range []struct {
		name     string
		checks   []decide.Check
		verdict  decide.Verdict
		deciding int
	}{
		{"blocked", []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Blocked: true}}, decide.Denied, 1},
		{"over the quota", []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Key: "b", Limit: l, Cost: 9, OverQuotaDenies: true}}, decide.Denied, 1},
		{"over the quota, without OverQuotaDenies", []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Key: "b", Limit: l, Cost: 9}}, decide.Invalid, 1},
		{"invalid before blocked", []decide.Check{{Rule: "b", Blocked: true}, {Rule: "a", Key: "a", Limit: l, Cost: -1}}, decide.Invalid, 1},
		{"shadow blocked", []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Blocked: true, Shadow: true}}, decide.Admitted, 0},
		{"shadow over the quota", []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Key: "b", Limit: l, Cost: 9, Shadow: true, OverQuotaDenies: true}}, decide.Admitted, 0},
		{"invalid limit under OverQuotaDenies", []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Key: "b", Limit: floodgate.Limit{Algorithm: floodgate.FixedWindow}, Cost: 2, OverQuotaDenies: true}}, decide.Invalid, 1},
		{"check-only blocked", []decide.Check{{Rule: "a", Key: "a", Limit: l}, {Rule: "b", Blocked: true, CheckOnly: true}}, decide.Admitted, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memory.New()
			e := newEngine(t, s)
			r := e.Decide(t.Context(), tc.checks)
			if r.Verdict != tc.verdict || r.Deciding != tc.deciding {
				t.Fatalf("verdict %v deciding %d, want %v %d (%+v)", r.Verdict, r.Deciding, tc.verdict, tc.deciding, r.Outcomes)
			}
			if r.Verdict == decide.Denied && r.RetryAfter != 0 {
				t.Errorf("RetryAfter %v for a denial no retry lifts, want 0", r.RetryAfter)
			}
			o := &r.Outcomes[1]
			if c := tc.checks[1]; (c.Blocked || c.OverQuotaDenies) && !c.CheckOnly && !o.WouldDeny() {
				t.Errorf("outcome %+v: would not deny", o)
			}
			if tc.checks[1].OverQuotaDenies && tc.verdict == decide.Denied && !errors.Is(o.Err, floodgate.ErrCostExceedsLimit) {
				t.Errorf("outcome Err %v, want ErrCostExceedsLimit", o.Err)
			}
			want := int64(4) // the first check took one
			if tc.verdict != decide.Admitted {
				want = 5
			}
			if got := remaining(t, s, "a", l); got != want {
				t.Errorf("key a has %d left, want %d", got, want)
			}
		})
	}
}

// TestFailErrorDecides: when several checks could not decide, the Result
// names a FailError check before a FailClosed one, whatever their order,
// and a denial before either.
func TestFailErrorDecides(t *testing.T) {
	l := floodgate.PerMinute(1)
	// A batch store, as every store Envoy's service runs on: all three are
	// asked at once.
	out := floodgate.ErrStoreUnavailable
	down := &faultyBatch{Store: memory.New(), fail: map[string]error{"c": out, "e": out, "o": out}}
	e := newEngine(t, down)
	checks := []decide.Check{
		{Rule: "closed", Key: "c", Limit: l, Failure: decide.FailClosed},
		{Rule: "error", Key: "e", Limit: l, Failure: decide.FailError},
		{Rule: "open", Key: "o", Limit: l},
	}
	if r := e.Decide(t.Context(), checks); r.Verdict != decide.Unavailable || r.Deciding != 1 {
		t.Fatalf("verdict %v deciding %d, want unavailable by the FailError check (1)", r.Verdict, r.Deciding)
	}
	if r := newEngine(t, failingStore{err: out}).Decide(t.Context(), checks[:1]); r.Verdict != decide.Unavailable || r.Deciding != 0 {
		t.Fatalf("closed alone: verdict %v deciding %d", r.Verdict, r.Deciding)
	}
	if got := decide.FailError.String(); got != "error" || !decide.FailError.Valid() {
		t.Errorf("FailError is %q, valid %v", got, decide.FailError.Valid())
	}
	if _, err := decide.ParseFailureMode("error"); err == nil {
		t.Error(`ParseFailureMode("error") succeeded: floodgate's own config has no such mode`)
	}
}
