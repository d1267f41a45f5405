package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteJSON writes r as indented JSON. Durations are integer nanoseconds in
// fields whose names end in _ns; algorithms are their configuration names.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r as an aligned text table for a terminal, followed by
// the patterns' descriptions and what the columns mean.
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "%d requests per %s, %s per pattern, seed %d, %s store\n\n", r.Limit, r.Window, r.Duration, r.Seed, r.Store)
	// The first two columns are text, padded here to read left-aligned;
	// tabwriter right-aligns the numbers.
	pw, aw := len("pattern"), len("algorithm")
	for _, x := range r.Results {
		pw, aw = max(pw, len(x.Pattern)), max(aw, len(x.Algorithm.String()))
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s  %-*s\trequests\tadmitted\tdenied\tmax/W\texact\texcess\terror\tretry mean\tretry p99\tbytes/key\t\n", pw, "pattern", aw, "algorithm")
	last := ""
	for _, x := range r.Results {
		name := x.Pattern
		if name == last {
			name = ""
		}
		last = x.Pattern
		mem := "-"
		if x.MemoryPerKey > 0 {
			mem = fmt.Sprint(x.MemoryPerKey)
		}
		fmt.Fprintf(tw, "%-*s  %-*s\t%d\t%d\t%d\t%d\t%d\t%+d\t%.1f%%\t%s\t%s\t%s\t\n",
			pw, name, aw, x.Algorithm, x.Requests, x.Admitted, x.Denied, x.MaxInWindow,
			x.ExactAdmitted, x.ExcessAdmitted, 100*x.ErrorRate,
			shortDuration(x.RetryAfterMean), shortDuration(x.RetryAfterP99), mem)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(ew, "\nPatterns (N = limit, W = window):")
	for _, p := range r.Patterns {
		fmt.Fprintf(ew, "  %-15s %s; %d requests from %d client(s)\n", p.Name, p.Description, p.Requests, p.Clients)
	}
	fmt.Fprintf(ew, `
Columns:
  max/W      most admitted for one key in any interval of length W (exact limit: at most %d)
  exact      admitted by an exact sliding-window log run on the same arrivals
  excess     admitted - exact (positive: more permissive than exact)
  error      share of requests decided differently from the exact log
  retry      Retry-After given to denied requests: mean and 99th percentile
  bytes/key  most memory one key's state took in the store
`, r.Limit)
	return ew.err
}

// shortDuration formats d to three significant figures, or "-" for zero.
func shortDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3gµs", float64(d)/float64(time.Microsecond))
	}
}

// errWriter keeps the first write error and drops later writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
