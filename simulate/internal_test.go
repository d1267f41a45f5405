package simulate

import (
	"reflect"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
)

func TestFigures(t *testing.T) {
	tests := []struct {
		patterns []string
		want     []string
	}{
		{[]string{"boundary-burst", "poisson-1x"}, []string{FigureBoundary, FigureBoundaryZoom, FigureWorstWindow}},
		{[]string{"poisson-1x"}, []string{FigureWorstWindow}}, // nothing to show of the attack
	}
	for _, tt := range tests {
		r := &Report{}
		for _, p := range tt.patterns {
			r.Results = append(r.Results, Result{Pattern: p})
		}
		var got []string
		for _, f := range r.figures() {
			got = append(got, f.name)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("figures for %v = %v, want %v", tt.patterns, got, tt.want)
		}
	}
}

func TestWindowCounts(t *testing.T) {
	s := time.Second
	got := windowCounts([]time.Duration{1 * s, 2 * s, 11 * s}, 10*s, 20*s)
	// Up at 1s and 2s; at 11s the 1s admission leaves as the 11s one
	// arrives; down at 12s and at 21s (after the end).
	want := plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}, {X: 2, Y: 2}, {X: 11, Y: 2}, {X: 12, Y: 1}, {X: 20, Y: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("windowCounts = %v, want %v", got, want)
	}
}

func TestNiceStep(t *testing.T) {
	for _, tt := range []struct{ span, want float64 }{{4, 0.5}, {8, 1}, {300, 50}, {290, 50}, {1500, 200}} {
		if got := niceStep(tt.span); got != tt.want {
			t.Errorf("niceStep(%g) = %g, want %g", tt.span, got, tt.want)
		}
	}
}

func TestShortWindow(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{time.Minute, "1m"}, {time.Hour, "1h"}, {90 * time.Minute, "1h30m"}, {10 * time.Second, "10s"}, {1500 * time.Millisecond, "1.5s"}, {time.Minute + time.Second, "1m1s"}} {
		if got := shortWindow(tt.d); got != tt.want {
			t.Errorf("shortWindow(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	us := time.Microsecond
	in := []Arrival{
		{At: 5 * us, Client: 1}, {At: 5 * us, Client: 0}, {At: 5*us + 300, Client: 0}, // same µs for client 0
		{At: 6 * us, Client: 0}, {At: -1, Client: 0}, {At: 100 * us, Client: 2}, // out of range
	}
	got := normalize(in, 100*us)
	want := []Arrival{{At: 5 * us, Client: 0}, {At: 5 * us, Client: 1}, {At: 6 * us, Client: 0}, {At: 7 * us, Client: 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("normalize = %v, want %v", got, want)
	}
}

func TestMeanP99(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	mean, p99 := meanP99(ds)
	if mean != 100500*time.Microsecond || p99 != 198*time.Millisecond {
		t.Errorf("meanP99(1..200ms) = %s, %s; want 100.5ms, 198ms", mean, p99)
	}
	if mean, p99 := meanP99(nil); mean != 0 || p99 != 0 {
		t.Errorf("meanP99(nil) = %s, %s", mean, p99)
	}
}
