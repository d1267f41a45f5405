package config

import (
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	cases := []struct {
		in      string
		tokens  int64
		per     time.Duration
		wantErr bool
	}{
		{"10/s", 10, time.Second, false},
		{"100/m", 100, time.Minute, false},
		{"5000/h", 5000, time.Hour, false},
		{"0.5/s", 1, 2 * time.Second, false},
		{"1/7s", 1, 7 * time.Second, false},
		{"1/500ms", 1, 500 * time.Millisecond, false},
		{"2.50/m", 5, 2 * time.Minute, false},
		{" 3/s ", 3, time.Second, false},
		{"", 0, 0, true},
		{"10", 0, 0, true},
		{"x/s", 0, 0, true},
		{"-1/s", 0, 0, true},
		{"+1/s", 0, 0, true},
		{"0/s", 0, 0, true},
		{"1/0s", 0, 0, true},
		{"1/-1s", 0, 0, true},
		{"1/fortnight", 0, 0, true},
		{"1.2.3/s", 0, 0, true},
		{"0.0000000000000000001/h", 0, 0, true},
		{"99999999999999999999/s", 0, 0, true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			n, per, err := ParseRate(c.in)
			if (err != nil) != c.wantErr {
				t.Fatalf("ParseRate(%q) error = %v, want error %v", c.in, err, c.wantErr)
			}
			if err == nil && (n != c.tokens || per != c.per) {
				t.Fatalf("ParseRate(%q) = %d per %s, want %d per %s", c.in, n, per, c.tokens, c.per)
			}
		})
	}
}
