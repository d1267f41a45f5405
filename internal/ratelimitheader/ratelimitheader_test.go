package ratelimitheader

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

var epoch = time.Unix(1_700_000_000, 0)

func TestWrite(t *testing.T) {
	p, err := ForLimit("fa", floodgate.PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	var list List
	list.Add(&p)
	denied := floodgate.Decision{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 2500 * time.Millisecond, ResetAfter: 30 * time.Second}
	admitted := floodgate.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 30*time.Second + time.Microsecond}
	tests := []struct {
		name string
		mode Mode
		d    floodgate.Decision
		want map[string]string
	}{
		{"denied, both", Both, denied, map[string]string{
			HeaderPolicy: `"fa";q=10;w=60`, HeaderRateLimit: `"fa";r=0;t=3`, // t is Retry-After on a denial
			HeaderLimit: "10", HeaderRemaining: "0", HeaderReset: "1700000030", HeaderRetryAfter: "3"}},
		{"admitted, both", Both, admitted, map[string]string{
			HeaderPolicy: `"fa";q=10;w=60`, HeaderRateLimit: `"fa";r=7;t=31`,
			HeaderLimit: "10", HeaderRemaining: "7", HeaderReset: "1700000031"}},
		{"admitted, ietf", IETF, admitted, map[string]string{HeaderPolicy: `"fa";q=10;w=60`, HeaderRateLimit: `"fa";r=7;t=31`}},
		{"admitted, legacy", Legacy, admitted, map[string]string{HeaderLimit: "10", HeaderRemaining: "7", HeaderReset: "1700000031"}},
		{"denied, none", None, denied, map[string]string{HeaderRetryAfter: "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			Write(h, tt.mode, list.String(), &p, tt.d, epoch)
			if len(h) != len(tt.want) {
				t.Errorf("headers %v, want %v", h, tt.want)
			}
			for k, v := range tt.want {
				if got := h[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
	if _, err := NewPolicy("naïve", 1, 1); err == nil {
		t.Error("non-ASCII name accepted")
	}
}

func TestList(t *testing.T) {
	a, _ := NewPolicy("a", 5, 60)
	b, _ := NewPolicy("b", 1000, 3600)
	var l List
	if l.String() != "" {
		t.Errorf("empty list %q", l.String())
	}
	l.Add(&a)
	l.Add(&b)
	l.Add(&a)
	if got, want := l.String(), `"a";q=5;w=60, "b";q=1000;w=3600, "a";q=5;w=60`; got != want {
		t.Errorf("list %q, want %q", got, want)
	}
}

func TestWindow(t *testing.T) {
	tests := []struct {
		l    floodgate.Limit
		want int64
	}{
		{floodgate.PerMinute(5), 60},
		{floodgate.NewLimit(floodgate.FixedWindow, 5, 1500*time.Millisecond), 2},
		{floodgate.NewTokenBucket(100, 10, time.Second), 10},
		{floodgate.NewTokenBucket(100, 30, time.Second), 4},
		{floodgate.NewTokenBucket(1<<40, 1, 366*24*time.Hour), sfMaxInteger},
	}
	for _, tt := range tests {
		if got := Window(tt.l); got != tt.want {
			t.Errorf("Window(%v) = %d, want %d", tt.l, got, tt.want)
		}
	}
	if p, _ := ForLimit("huge", floodgate.NewTokenBucket(1<<40, 1, 366*24*time.Hour)); p.member != `"huge";q=1099511627776;w=999999999999999` {
		t.Errorf("huge member %q: w must be clamped to the largest SF integer", p.member)
	}
}

// TestDecidedWrite: a decided request's headers list the checks that have
// a Policy, in order, describe the deciding one, and carry the fallback marker
// with Local; a mode without the IETF fields lists nothing.
func TestDecidedWrite(t *testing.T) {
	a, _ := NewPolicy("a", 5, 60)
	b, _ := NewPolicy("b", 10, 1)
	pols := []*Policy{&a, nil, &b} // the second check is not listed
	admitted := floodgate.Decision{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: time.Second}
	denied := floodgate.Decision{Limit: 5, RetryAfter: 1500 * time.Millisecond, ResetAfter: 12 * time.Second}
	tests := []struct {
		name string
		d    Decided
		mode Mode
		want map[string]string
	}{
		{"admitted", Decided{Policies: pols, Deciding: 2, Decision: admitted}, Both, map[string]string{
			HeaderPolicy: `"a";q=5;w=60, "b";q=10;w=1`, HeaderRateLimit: `"b";r=4;t=1`,
			HeaderLimit: "10", HeaderRemaining: "4", HeaderReset: "1700000001"}},
		{"denied, local", Decided{Policies: pols, Deciding: 0, Decision: denied, Local: true}, IETF, map[string]string{
			HeaderPolicy: `"a";q=5;w=60, "b";q=10;w=1`, HeaderRateLimit: `"a";r=0;t=2`, HeaderRetryAfter: "2", HeaderFallback: FallbackLocal}},
		{"nothing decided", Decided{Policies: pols, Deciding: -1}, Both, map[string]string{
			HeaderPolicy: `"a";q=5;w=60, "b";q=10;w=1`}},
		{"only shadow", Decided{Policies: pols[1:2], Deciding: -1}, Both, map[string]string{}},
		{"legacy", Decided{Policies: pols, Deciding: 2, Decision: admitted}, Legacy, map[string]string{
			HeaderLimit: "10", HeaderRemaining: "4", HeaderReset: "1700000001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			tt.d.Write(h, tt.mode, epoch)
			if len(h) != len(tt.want) {
				t.Errorf("headers %v, want %v", h, tt.want)
			}
			for k, v := range tt.want {
				if got := h[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestModeValid(t *testing.T) {
	for m := range Mode(8) {
		if got, want := m.Valid(), m <= None; got != want {
			t.Errorf("Mode(%d).Valid() = %v, want %v", m, got, want)
		}
	}
}
