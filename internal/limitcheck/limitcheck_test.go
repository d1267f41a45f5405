package limitcheck

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

func TestAllow(t *testing.T) {
	ok := floodgate.PerMinute(5)
	tests := []struct {
		name      string
		limit     floodgate.Limit
		cost      int64
		want      error
		wantLimit int64
	}{
		{"valid", ok, 5, nil, 0},
		{"zero cost (a check that takes nothing)", ok, 0, nil, 0},
		{"negative cost", ok, -3, floodgate.ErrInvalidCost, 5},
		{"cost above the quota", ok, 6, floodgate.ErrCostExceedsLimit, 5},
		{"a log's largest cost", floodgate.PerHour(1 << 20), MaxLogCost, nil, 0},
		{"a log's cost above MaxLogCost", floodgate.PerHour(1 << 20), MaxLogCost + 1, floodgate.ErrInvalidCost, 1 << 20},
		{"a bucket's cost above MaxLogCost", floodgate.NewTokenBucket(1<<20, 1<<20, time.Hour), MaxLogCost + 1, nil, 0},
		{"invalid limit", floodgate.PerMinute(0), 1, floodgate.ErrInvalidLimit, 0},
	}
	for _, tt := range tests {
		d, err := Allow(tt.limit, tt.cost)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: err %v, want %v", tt.name, err, tt.want)
		}
		if d.Allowed || d.Limit != tt.wantLimit {
			t.Errorf("%s: decision %+v, want not allowed with Limit %d", tt.name, d, tt.wantLimit)
		}
	}
}
