package bench

import (
	"math"
	"strconv"
)

// ------------------------------------------------------------- formatting --

// fmtRate formats decisions/s: 84.2k, 1.23M.
func fmtRate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 2, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// fmtMs formats milliseconds to 3 significant digits.
func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func fmtFloat(v float64, prec int) string {
	if math.IsNaN(v) || v < 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// fmtAllocs formats allocations per operation: 0, 0.02, 1.5, 12; "<1"
// when the count was rounded down to 0 but bytes were allocated (as
// testing.BenchmarkResult.AllocsPerOp does).
func fmtAllocs(v, bytes float64) string {
	switch {
	case v == 0 && bytes > 0:
		return "<1"
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func fmtRatio(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "x" }

func fmtPct(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

func yes(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}
