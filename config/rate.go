package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/fixedpoint"
)

// ParseRate parses a refill rate such as "10/s", "100/m", "5000/h", "0.5/s"
// or "1/500ms" into a number of tokens per period, both exact integers:
// "0.5/s" is 1 per 2s and "2.5/m" is 5 per 2m. Units are s, m, h, or any
// Go duration ("1/7s").
func ParseRate(s string) (tokens int64, per time.Duration, err error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("rate %q: want N/unit such as 10/s, 100/m, 5/h or 1/500ms", s)
	}
	switch unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		if per, err = time.ParseDuration(unit); err != nil {
			return 0, 0, fmt.Errorf("rate %q: unit %q is not s, m, h or a duration such as 500ms", s, unit)
		}
	}
	if per <= 0 {
		return 0, 0, fmt.Errorf("rate %q: period must be positive", s)
	}
	// Scale a decimal count to an integer: 0.5/s is 5 per 10s, then reduced.
	intPart, frac, _ := strings.Cut(num, ".")
	digits := intPart + frac
	if digits == "" || strings.ContainsAny(digits, "+-") {
		return 0, 0, fmt.Errorf("rate %q: count %q is not a positive number", s, num)
	}
	n, perr := strconv.ParseInt(digits, 10, 64)
	if perr != nil || n <= 0 {
		return 0, 0, fmt.Errorf("rate %q: count %q is not a positive number", s, num)
	}
	scale := int64(1)
	for range len(frac) {
		if scale > math.MaxInt64/10 || int64(per) > math.MaxInt64/(scale*10) {
			return 0, 0, fmt.Errorf("rate %q: count %q has too many decimals", s, num)
		}
		scale *= 10
	}
	// Undo only the decimal scaling, so "100/m" stays 100 per minute.
	g := fixedpoint.GCD(n, scale)
	return n / g, per * time.Duration(scale/g), nil
}
