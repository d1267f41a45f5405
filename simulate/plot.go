package simulate

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/chart"
)

// The figures Plot writes, each as .png and .svg.
const (
	// FigureBoundary shows, for the boundary-burst pattern, the requests each
	// algorithm admitted in the window ending at each moment, with the limit.
	FigureBoundary = "boundary-burst"
	// FigureBoundaryZoom shows the first attack of the boundary-burst
	// pattern up close: the requests each algorithm admitted from shortly
	// before the first window edge to shortly after it.
	FigureBoundaryZoom = "boundary-burst-zoom"
	// FigureWorstWindow shows, per pattern, the most requests each algorithm
	// admitted for one key in any window, with the limit.
	FigureWorstWindow = "worst-window"
)

// Figure size, for a page or a README.
const (
	figWidth  = 8 * vg.Inch
	figHeight = 4.5 * vg.Inch
)

// style is how one algorithm is drawn in every figure.
type style struct {
	color  color.Color
	dashes []vg.Length
	width  vg.Length
}

func algorithmStyle(a floodgate.Algorithm) style {
	switch a {
	case floodgate.SlidingWindowLog:
		return style{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, nil, 2.5}
	case floodgate.TokenBucket:
		return style{color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, []vg.Length{6, 3}, 2}
	case floodgate.SlidingWindowCounter:
		return style{color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, []vg.Length{2, 2}, 2}
	case floodgate.FixedWindow:
		return style{color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, nil, 2}
	}
	return style{color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, []vg.Length{1, 3}, 1} // an algorithm without a style of its own
}

var limitColor = color.Gray{Y: 0x40}

// Plot writes the figures of r to dir (created if missing) as PNG and SVG
// files, and returns their paths. The boundary figure needs the
// boundary-burst pattern and is skipped without it. Plot uses the results'
// Admissions, so it works on a Report returned by Run, not on one decoded
// from JSON.
func (r *Report) Plot(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("simulate: plot: %w", err)
	}
	var files []string
	for _, f := range r.figures() {
		p, err := f.make()
		if err != nil {
			return files, fmt.Errorf("simulate: plot %s: %w", f.name, err)
		}
		chart.Sans(p)
		p.Add(legendBackdrop{})
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, f.name+ext)
			if err := save(p, path); err != nil {
				return files, fmt.Errorf("simulate: plot %s: %w", path, err)
			}
			files = append(files, path)
		}
	}
	return files, nil
}

// figure is one chart Plot writes: its file name without extension, and the
// function that builds it.
type figure struct {
	name string
	make func() (*plot.Plot, error)
}

// figures returns the charts r has the results for.
func (r *Report) figures() []figure {
	var figs []figure
	if slices.ContainsFunc(r.Results, func(x Result) bool { return x.Pattern == "boundary-burst" }) {
		figs = append(figs, figure{FigureBoundary, r.boundaryPlot}, figure{FigureBoundaryZoom, r.boundaryZoomPlot})
	}
	return append(figs, figure{FigureWorstWindow, r.worstWindowPlot})
}

// save writes p to path, as PNG or SVG after its extension.
func save(p *plot.Plot, path string) error {
	canvas, out := chart.NewCanvas(path, figWidth, figHeight)
	p.Draw(draw.New(canvas))
	return chart.WriteFile(path, out)
}

// legendBackdrop is a plotter, added last, that paints the area under the
// legend white so grid lines do not run through its text (the legend is
// drawn after every plotter). It covers the legend's corner of the data area
// (the legend sits a few points further out, in the axes' padding, where
// nothing else is drawn). It handles legends at the top only.
type legendBackdrop struct{}

// Plot implements plot.Plotter.
func (legendBackdrop) Plot(c draw.Canvas, p *plot.Plot) {
	// Legend.Rectangle swaps left and right in gonum/plot v0.17, so only
	// its size is used.
	size := p.Legend.Rectangle(c).Size()
	m := vg.Points(6)
	r := vg.Rectangle{Min: vg.Point{X: c.Min.X, Y: c.Max.Y - size.Y - m}, Max: vg.Point{X: c.Min.X + size.X + m, Y: c.Max.Y + 1}}
	if !p.Legend.Left {
		r.Min.X, r.Max.X = c.Max.X-size.X-m, c.Max.X
	}
	c.SetColor(color.White)
	c.Fill(r.Path())
}

// windowCounts returns the step function "admissions in the window (t-w, t]"
// over [0, end]: a point at every admission and every moment one leaves the
// window, to be drawn as a post-step line.
func windowCounts(admissions []time.Duration, w, end time.Duration) plotter.XYs {
	type event struct {
		at    time.Duration
		delta int
	}
	events := make([]event, 0, 2*len(admissions))
	for _, t := range admissions {
		events = append(events, event{t, +1}, event{t + w, -1})
	}
	// At equal times, leaving before arriving: (t-w, t] excludes t-w.
	slices.SortFunc(events, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	xys := plotter.XYs{{X: 0, Y: 0}}
	n := 0
	for i, e := range events {
		if e.at > end {
			break
		}
		n += e.delta
		if i+1 < len(events) && events[i+1].at == e.at {
			continue // one point per moment
		}
		xys = append(xys, plotter.XY{X: e.at.Seconds(), Y: float64(n)})
	}
	return append(xys, plotter.XY{X: end.Seconds(), Y: float64(n)})
}

func (r *Report) boundaryPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Boundary-burst attack: requests admitted in the last %s, at each moment", shortWindow(r.Window))
	p.X.Label.Text = "simulated time (seconds)"
	p.Y.Label.Text = fmt.Sprintf("admitted in the trailing %s", shortWindow(r.Window))
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.ThumbnailWidth = 0.5 * vg.Inch
	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(r.Limit)}, {X: r.Duration.Seconds(), Y: float64(r.Limit)}})
	if err != nil {
		return nil, err
	}
	limit.Color, limit.Width, limit.Dashes = limitColor, 1.5, []vg.Length{vg.Points(8), vg.Points(4)}
	p.Add(limit)
	p.Legend.Add(fmt.Sprintf("limit: %d per %s", r.Limit, shortWindow(r.Window)), limit)
	maxY := float64(r.Limit)
	for _, x := range r.Results {
		if x.Pattern != "boundary-burst" {
			continue
		}
		l, err := plotter.NewLine(windowCounts(x.Admissions, r.Window, r.Duration))
		if err != nil {
			return nil, err
		}
		s := algorithmStyle(x.Algorithm)
		l.StepStyle = plotter.PostStep
		l.Color, l.Width, l.Dashes = s.color, vg.Points(float64(s.width)), s.dashes
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (worst %d)", x.Algorithm, x.MaxInWindow), l)
		maxY = max(maxY, float64(x.MaxInWindow))
	}
	p.X.Min, p.X.Max = 0, r.Duration.Seconds()
	p.Y.Min, p.Y.Max = 0, maxY*1.45 // room for the legend above the lines
	xstep := r.Window.Seconds()
	if r.Duration > 10*r.Window {
		xstep = niceStep(r.Duration.Seconds())
	}
	p.X.Tick.Marker = stepTicks{step: xstep}
	p.Y.Tick.Marker = stepTicks{step: niceStep(p.Y.Max)}
	return p, nil
}

func (r *Report) worstWindowPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Most requests admitted for one key in any %s window, per pattern (limit %d)", shortWindow(r.Window), r.Limit)
	p.Y.Label.Text = "requests admitted in the worst window"
	p.Legend.Top, p.Legend.Left = true, true
	var algs []floodgate.Algorithm
	for _, x := range r.Results {
		if !slices.Contains(algs, x.Algorithm) {
			algs = append(algs, x.Algorithm)
		}
	}
	var names []string
	for _, pi := range r.Patterns {
		names = append(names, pi.Name)
	}
	barWidth := vg.Points(float64(figWidth) * 0.7 / float64(max(1, len(names)*len(algs))))
	maxY := float64(r.Limit)
	for i, a := range algs {
		vals := make(plotter.Values, len(names))
		for j, n := range names {
			if x, ok := r.Result(n, a); ok {
				vals[j] = float64(x.MaxInWindow)
				maxY = max(maxY, vals[j])
			}
		}
		b, err := plotter.NewBarChart(vals, barWidth)
		if err != nil {
			return nil, err
		}
		s := algorithmStyle(a)
		b.Color = s.color
		b.LineStyle.Width = 0
		b.Offset = barWidth * vg.Length(float64(i)-float64(len(algs)-1)/2)
		p.Add(b)
		p.Legend.Add(a.String(), b)
	}
	limit, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: float64(r.Limit)}, {X: float64(len(names)) - 0.5, Y: float64(r.Limit)}})
	if err != nil {
		return nil, err
	}
	limit.Color, limit.Width, limit.Dashes = limitColor, 1.5, []vg.Length{vg.Points(8), vg.Points(4)}
	p.Add(limit)
	p.Legend.Add(fmt.Sprintf("limit: %d", r.Limit), limit)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.Y.Min, p.Y.Max = 0, maxY*1.5
	p.Y.Tick.Marker = stepTicks{step: niceStep(p.Y.Max)}
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0
	p.Add(grid)
	return p, nil
}

func (r *Report) boundaryZoomPlot() (*plot.Plot, error) {
	span := BurstSpan(r.Window)
	lo, hi := r.Window-2*span, r.Window+2*span
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Boundary-burst attack, first window edge: %d requests just before, %d just after", r.Limit, r.Limit)
	p.X.Label.Text = "simulated time (seconds)"
	p.Y.Label.Text = fmt.Sprintf("requests admitted since %gs", lo.Seconds())
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.ThumbnailWidth = 0.5 * vg.Inch
	maxY := float64(r.Limit)
	var lines []*plotter.Line
	for _, x := range r.Results {
		if x.Pattern != "boundary-burst" {
			continue
		}
		xys := plotter.XYs{{X: lo.Seconds(), Y: 0}}
		n := 0
		for _, t := range x.Admissions {
			if t >= lo && t <= hi {
				n++
				xys = append(xys, plotter.XY{X: t.Seconds(), Y: float64(n)})
			}
		}
		xys = append(xys, plotter.XY{X: hi.Seconds(), Y: float64(n)})
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		s := algorithmStyle(x.Algorithm)
		l.StepStyle = plotter.PostStep
		l.Color, l.Width, l.Dashes = s.color, vg.Points(float64(s.width)), s.dashes
		lines = append(lines, l)
		p.Legend.Add(fmt.Sprintf("%s (%d admitted)", x.Algorithm, n), l)
		maxY = max(maxY, float64(n))
	}
	maxY *= 1.45
	limit, err := plotter.NewLine(plotter.XYs{{X: lo.Seconds(), Y: float64(r.Limit)}, {X: hi.Seconds(), Y: float64(r.Limit)}})
	if err != nil {
		return nil, err
	}
	limit.Color, limit.Width, limit.Dashes = limitColor, 1.5, []vg.Length{vg.Points(8), vg.Points(4)}
	p.Legend.Add(fmt.Sprintf("limit: %d per %s", r.Limit, shortWindow(r.Window)), limit)
	edge, err := plotter.NewLine(plotter.XYs{{X: r.Window.Seconds(), Y: 0}, {X: r.Window.Seconds(), Y: maxY}})
	if err != nil {
		return nil, err
	}
	edge.Color, edge.Width, edge.Dashes = limitColor, 1, []vg.Length{vg.Points(2), vg.Points(3)}
	p.Legend.Add("fixed-window edge", edge)
	p.Add(limit, edge)
	for _, l := range lines {
		p.Add(l)
	}
	p.X.Min, p.X.Max = lo.Seconds(), hi.Seconds()
	p.X.Tick.Marker = stepTicks{step: niceStep(hi.Seconds() - lo.Seconds())}
	p.Y.Min, p.Y.Max = 0, maxY
	p.Y.Tick.Marker = stepTicks{step: niceStep(maxY)}
	return p, nil
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that divides
// span into at most eight parts.
func niceStep(span float64) float64 {
	base := 1e-3
	for {
		for _, m := range []float64{1, 2, 5} {
			if s := base * m; span/s <= 8 {
				return s
			}
		}
		base *= 10
	}
}

// stepTicks labels an axis every step, with a minor tick halfway.
type stepTicks struct{ step float64 }

// Ticks implements plot.Ticker.
func (t stepTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for i := math.Ceil(lo / t.step); i*t.step <= hi+t.step/1e6; i++ {
		v := i * t.step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if half := v + t.step/2; half <= hi {
			ticks = append(ticks, plot.Tick{Value: half})
		}
	}
	return ticks
}

// shortWindow formats d without zero trailing units: "1m", "1h30m", "10s".
func shortWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
