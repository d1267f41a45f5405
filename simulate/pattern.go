package simulate

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Arrival is one request of a traffic pattern: when it arrives, measured from
// the start of the simulation, and which client sends it. Each client is
// limited under its own key.
type Arrival struct {
	At     time.Duration // from the start of the simulation
	Client int           // the client's number; its key is distinct per client
}

// Params are the figures a pattern scales itself by: the limit it is run
// against (Limit requests per Window) and how long it lasts.
type Params struct {
	Limit    int64         // N: requests admitted per Window
	Window   time.Duration // W
	Duration time.Duration // how long the pattern sends, from 0
}

// Pattern is a named traffic pattern. Generate must return the same arrivals
// for the same Params and the same random source. They need not be sorted:
// Run drops those outside [0, Duration), truncates the rest to microseconds,
// sorts them, and moves a client's arrivals that share a microsecond apart
// by one microsecond each.
type Pattern struct {
	// Name identifies the pattern on the command line and in reports, such
	// as "boundary-burst".
	Name string
	// Description says in one line what the traffic is.
	Description string
	// Generate returns the arrivals for p, drawing any randomness from rng.
	Generate func(p Params, rng *rand.Rand) []Arrival
}

// Shapes of the built-in patterns.
const (
	// onOffCycle and onOffOn, in windows: the on/off pattern repeats every
	// 1.5 windows, sending during the first quarter window of each cycle.
	onOffCycle = 3.0 / 2
	onOffOn    = 1.0 / 4
	// onOffLoad is the requests sent per burst, in limits: 1.5 limits in a
	// quarter window, so on average the pattern offers exactly the limit.
	onOffLoad = 1.5
	// manyClients send in the many-clients pattern, the first manyAbusers
	// of them abusive.
	manyClients = 40
	manyAbusers = 3
	// manyRate and abuseRate are the well-behaved and abusive clients'
	// Poisson rates, in limits.
	manyRate  = 0.25
	abuseRate = 4.0
)

// Patterns returns the built-in patterns, in report order:
//
//   - boundary-burst: the window-edge attack. Every other window edge, one client
//     sends Limit requests evenly spread over the second before the edge and
//     Limit over the second after it (over Window/4 instead, if that is
//     shorter than a second). A fixed window admits all 2*Limit.
//   - poisson-0.5x, poisson-1x, poisson-3x: one client sending at random
//     (exponential gaps) at half, once and three times the limit's rate.
//   - on-off: one client sending bursts of 1.5*Limit requests (Poisson) in a
//     quarter window, once every 1.5 windows: on average exactly the limit.
//   - many-clients: 40 clients with a key each, 37 sending at a quarter of
//     the limit and 3 abusers at four times it.
func Patterns() []Pattern {
	return []Pattern{
		{
			Name:        "boundary-burst",
			Description: "N requests in the second before every other window edge, N in the second after",
			Generate:    boundaryBurst,
		},
		poisson("poisson-0.5x", 0.5),
		poisson("poisson-1x", 1),
		poisson("poisson-3x", 3),
		{
			Name:        "on-off",
			Description: fmt.Sprintf("bursts of %.1fN in W/4 every 1.5W (on average 1x the limit)", onOffLoad),
			Generate:    onOff,
		},
		{
			Name:        "many-clients",
			Description: fmt.Sprintf("%d clients with a key each: %d at %gx the limit, %d abusers at %gx", manyClients, manyClients-manyAbusers, manyRate, manyAbusers, abuseRate),
			Generate:    many,
		},
	}
}

// PatternNames returns the names of the built-in patterns, in report order.
func PatternNames() []string {
	var names []string
	for _, p := range Patterns() {
		names = append(names, p.Name)
	}
	return names
}

// LookupPatterns returns the built-in patterns with the given names, in the
// order given, or an error naming the first unknown one. "all" (or no names)
// selects every built-in pattern.
func LookupPatterns(names ...string) ([]Pattern, error) {
	all := Patterns()
	if len(names) == 0 || len(names) == 1 && names[0] == "all" {
		return all, nil
	}
	var out []Pattern
	for _, n := range names {
		i := slices.IndexFunc(all, func(p Pattern) bool { return p.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("simulate: unknown pattern %q (want all or one of %s)", n, strings.Join(PatternNames(), ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// BurstSpan returns the length of each half of a boundary-burst attack
// against windows of length w: one second, or w/4 if that is shorter.
func BurstSpan(w time.Duration) time.Duration { return min(time.Second, w/4) }

// boundaryBurst attacks the edges W, 3W, 5W, ... that leave room for the
// second half of the attack before the end.
func boundaryBurst(p Params, _ *rand.Rand) []Arrival {
	span := BurstSpan(p.Window)
	var out []Arrival
	for edge := p.Window; edge+span <= p.Duration; edge += 2 * p.Window {
		for i := range p.Limit {
			step := time.Duration(int64(span) * i / p.Limit)
			out = append(out,
				Arrival{At: edge - span + step},
				Arrival{At: edge + step},
			)
		}
	}
	return out
}

func poisson(name string, factor float64) Pattern {
	return Pattern{
		Name:        name,
		Description: fmt.Sprintf("one client, Poisson arrivals at %gx the limit's rate", factor),
		Generate: func(p Params, rng *rand.Rand) []Arrival {
			return poissonArrivals(nil, rng, 0, 0, p.Duration, factor*float64(p.Limit)/p.Window.Seconds())
		},
	}
}

// poissonArrivals appends the arrivals of a Poisson process of rate (per
// second) for client over [from, to).
func poissonArrivals(out []Arrival, rng *rand.Rand, client int, from, to time.Duration, rate float64) []Arrival {
	t := from.Seconds()
	for {
		t += rng.ExpFloat64() / rate
		at := time.Duration(math.Round(t*1e6)) * time.Microsecond
		if at >= to {
			return out
		}
		out = append(out, Arrival{At: at, Client: client})
	}
}

func onOff(p Params, rng *rand.Rand) []Arrival {
	cycle := time.Duration(float64(p.Window) * onOffCycle)
	on := time.Duration(float64(p.Window) * onOffOn)
	rate := onOffLoad * float64(p.Limit) / on.Seconds()
	var out []Arrival
	for start := time.Duration(0); start < p.Duration; start += cycle {
		out = poissonArrivals(out, rng, 0, start, min(start+on, p.Duration), rate)
	}
	return out
}

func many(p Params, rng *rand.Rand) []Arrival {
	perSecond := float64(p.Limit) / p.Window.Seconds()
	var out []Arrival
	for c := range manyClients {
		rate := manyRate
		if c < manyAbusers {
			rate = abuseRate
		}
		out = poissonArrivals(out, rng, c, 0, p.Duration, rate*perSecond)
	}
	return out
}

// normalize drops arrivals outside [0, d), truncates the rest to whole
// microseconds (the stores' resolution), sorts them by time (then client),
// and moves a client's arrivals that share a microsecond one microsecond
// apart (possibly to d or a little after), so that every store and the exact
// reference see the same distinct times.
func normalize(arrivals []Arrival, d time.Duration) []Arrival {
	out := make([]Arrival, 0, len(arrivals))
	for _, a := range arrivals {
		if a.At >= 0 && a.At < d {
			a.At = a.At.Truncate(time.Microsecond)
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b Arrival) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Client, b.Client))
	})
	last := map[int]time.Duration{}
	for i := range out {
		if prev, ok := last[out[i].Client]; ok && out[i].At <= prev {
			out[i].At = prev + time.Microsecond
		}
		last[out[i].Client] = out[i].At
	}
	// Bumping can reorder arrivals of different clients by a microsecond.
	slices.SortStableFunc(out, func(a, b Arrival) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Client, b.Client))
	})
	return out
}
