package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/floodgate-rl/floodgate/internal/chart"
)

// The charts WriteCharts writes, each as .png and .svg.
const (
	ChartThroughput = "peers-throughput"
	ChartP99        = "peers-p99"
	ChartMemory     = "peers-memory"
)

// colors per contender: floodgate in strong colours, peers muted.
var colors = map[string]color.Color{
	"fg-tb":       color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"fg-swl":      color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"redis_rate":  color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"ulule":       color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"throttled":   color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"x-time-rate": color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	"sethvargo":   color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

func colorOf(id string) color.Color {
	if c, ok := colors[id]; ok {
		return c
	}
	return color.Gray{Y: 0x60}
}

// WriteCharts writes the charts of r into dir and returns their paths.
func (r *Report) WriteCharts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	type chart struct {
		name   string
		w, h   vg.Length
		tiles  draw.Tiles
		plots  [][]*plot.Plot
		legend []legendEntry
	}
	var charts []chart
	if len(r.Redis) > 0 {
		tp, legend, err := r.redisPlots(false)
		if err != nil {
			return nil, err
		}
		lp, _, err := r.redisPlots(true)
		if err != nil {
			return nil, err
		}
		rows, cols := len(tp), len(tp[0])
		tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		w, h := vg.Length(cols)*5*vg.Inch, vg.Length(rows)*3.6*vg.Inch
		charts = append(charts, chart{ChartThroughput, w, h, tiles, tp, legend}, chart{ChartP99, w, h, tiles, lp, legend})
	}
	if len(r.InProcess) > 0 {
		mp, legend, err := r.memoryPlot()
		if err != nil {
			return nil, err
		}
		charts = append(charts, chart{ChartMemory, 9 * vg.Inch, 4.8 * vg.Inch, draw.Tiles{Rows: 1, Cols: 1, PadTop: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}, [][]*plot.Plot{{mp}}, legend})
	}
	var files []string
	for _, c := range charts {
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, c.name+ext)
			if err := saveTiles(path, c.w, c.h, c.tiles, c.plots, c.legend); err != nil {
				return files, fmt.Errorf("%s: %w", path, err)
			}
			files = append(files, path)
		}
	}
	return files, nil
}

// legendEntry is one line of a chart's shared legend.
type legendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

// legendColumns is how many columns the shared legend spreads over.
const legendColumns = 3

// saveTiles draws plots in tiles on one canvas, under a strip holding the
// shared legend (if any), and writes it to path, as PNG or SVG after its
// extension.
func saveTiles(path string, w, h vg.Length, t draw.Tiles, plots [][]*plot.Plot, legend []legendEntry) error {
	canvas, out := chart.NewCanvas(path, w, h)
	dc := draw.New(canvas)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	if len(legend) > 0 {
		rows := (len(legend) + legendColumns - 1) / legendColumns
		strip := vg.Length(rows)*vg.Points(13) + vg.Points(10)
		top := draw.Crop(dc, 0, 0, dc.Size().Y-strip, 0)
		colW := top.Size().X / legendColumns
		for col := range legendColumns {
			l := plot.NewLegend()
			l.TextStyle.Font.Variant = "Sans"
			l.TextStyle.Font.Size = vg.Points(10)
			l.Top, l.Left = true, true
			l.ThumbnailWidth = vg.Points(24)
			for i := col * rows; i < min((col+1)*rows, len(legend)); i++ {
				l.Add(legend[i].name, legend[i].thumbs...)
			}
			l.Draw(draw.Crop(top, vg.Length(col)*colW+vg.Points(40), -(vg.Length(legendColumns-1-col) * colW), 0, -vg.Points(4)))
		}
		dc = draw.Crop(dc, 0, 0, 0, -strip)
	}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] != nil {
				plots[i][j].Draw(canvases[i][j])
			}
		}
	}
	return chart.WriteFile(path, out)
}

// concTicks labels the concurrency positions 0..n-1 with their values.
type concTicks []int

// Ticks implements plot.Ticker.
func (t concTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for i, c := range t {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: strconv.Itoa(c)})
	}
	return ticks
}

// rateTicks labels decisions/s as 50k, 100k.
type rateTicks struct{}

// Ticks implements plot.Ticker.
func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = fmtTick(ticks[i].Value)
		}
	}
	return ticks
}

// fmtTick formats a round axis value: 0, 500, 20k, 1.5M.
func fmtTick(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// msTicks labels a log axis of milliseconds at 1, 2 and 5 times each power
// of ten.
type msTicks struct{}

// Ticks implements plot.Ticker.
func (msTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo*0.999 || v > hi*1.001 {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return ticks
}

// redisPlots returns one plot per workload (rows) and backend (columns):
// median decisions/s with the range as error bars, or the median p99 on a
// log scale.
func (r *Report) redisPlots(latency bool) ([][]*plot.Plot, []legendEntry, error) {
	backends, workloads, concs := r.cells()
	ids, names := r.contenders()
	var legend []legendEntry
	out := make([][]*plot.Plot, len(workloads))
	for i, w := range workloads {
		out[i] = make([]*plot.Plot, len(backends))
		for j, b := range backends {
			p := plot.New()
			chart.Sans(p)
			p.Title.Text = b + ", " + workloadTitles[w]
			p.X.Label.Text = "concurrent callers"
			p.X.Tick.Marker = concTicks(concs)
			p.X.Min, p.X.Max = -0.3, float64(len(concs))-0.7
			if latency {
				p.Y.Label.Text = "p99 latency (ms)"
				p.Y.Scale = plot.LogScale{}
				p.Y.Tick.Marker = msTicks{}
			} else {
				p.Y.Label.Text = "decisions per second"
				p.Y.Tick.Marker = rateTicks{}
				p.Y.Min = 0
			}
			p.Add(plotter.NewGrid())
			for k, id := range ids {
				if id == "floor-tb" || id == "floor-swl" {
					continue // in the command-floor table only
				}
				var pts plotter.XYs
				var errs plotter.YErrors
				for ci, c := range concs {
					x, ok := r.find(b, w, c, id)
					if !ok {
						continue
					}
					// Offset each contender a little so error bars do not
					// hide each other.
					xpos := float64(ci) + (float64(k)-float64(len(ids)-1)/2)*0.04
					if latency {
						v := x.Of(p99).Med
						if v > 0 {
							pts = append(pts, plotter.XY{X: xpos, Y: v})
						}
						continue
					}
					st := x.Of(decRate)
					pts = append(pts, plotter.XY{X: xpos, Y: st.Med})
					errs = append(errs, struct{ Low, High float64 }{st.Med - st.Lo, st.Hi - st.Med})
				}
				if len(pts) == 0 {
					continue
				}
				line, scatter, err := plotter.NewLinePoints(pts)
				if err != nil {
					return nil, nil, err
				}
				line.Color, scatter.Color = colorOf(id), colorOf(id)
				line.Width = vg.Points(1.5)
				if id == "fg-tb" || id == "fg-swl" {
					line.Width = vg.Points(2.5)
				}
				scatter.Radius = vg.Points(2.5)
				p.Add(line, scatter)
				if !latency {
					eb, err := plotter.NewYErrorBars(struct {
						plotter.XYs
						plotter.YErrors
					}{pts, errs})
					if err != nil {
						return nil, nil, err
					}
					eb.Color = colorOf(id)
					p.Add(eb)
				}
				if i == 0 && j == 0 {
					legend = append(legend, legendEntry{names[id], []plot.Thumbnailer{line, scatter}})
				}
			}
			if latency {
				fixLogRange(p)
			}
			out[i][j] = p
		}
	}
	return out, legend, nil
}

// fixLogRange widens a log axis to the 1-2-5 steps around its data.
func fixLogRange(p *plot.Plot) {
	if p.Y.Min <= 0 {
		return
	}
	down := func(v float64) float64 {
		e := math.Pow(10, math.Floor(math.Log10(v)))
		for _, m := range []float64{5, 2, 1} {
			if m*e <= v {
				return m * e
			}
		}
		return e
	}
	up := func(v float64) float64 {
		e := math.Pow(10, math.Floor(math.Log10(v)))
		for _, m := range []float64{1, 2, 5, 10} {
			if m*e >= v {
				return m * e
			}
		}
		return 10 * e
	}
	p.Y.Min, p.Y.Max = down(p.Y.Min), up(p.Y.Max)
}

// memoryPlot is a grouped bar chart of median ns per decision: one group
// per workload, one bar per contender, with the target as a dashed line.
func (r *Report) memoryPlot() (*plot.Plot, []legendEntry, error) {
	var workloads, ids []string
	names := map[string]string{}
	for _, x := range r.InProcess {
		if !contains(workloads, x.Workload) {
			workloads = append(workloads, x.Workload)
		}
		if !contains(ids, x.Contender) {
			ids = append(ids, x.Contender)
			names[x.Contender] = x.Name
		}
	}
	p := plot.New()
	chart.Sans(p)
	p.Title.Text = "In process: nanoseconds per decision (median; lower is better)"
	p.Y.Label.Text = "ns per decision"
	p.Y.Tick.Marker = rateTicks{}
	p.Add(plotter.NewGrid())
	var legend []legendEntry
	barWidth := vg.Points(14)
	for k, id := range ids {
		vals := make(plotter.Values, len(workloads))
		for i, w := range workloads {
			if x, ok := r.findMem(w, id); ok {
				vals[i] = x.Of(func(s MemSample) float64 { return s.NsPerOp }).Med
			}
		}
		b, err := plotter.NewBarChart(vals, barWidth)
		if err != nil {
			return nil, nil, err
		}
		b.Color = colorOf(id)
		b.LineStyle.Width = 0
		b.Offset = barWidth * vg.Length(float64(k)-float64(len(ids)-1)/2)
		p.Add(b)
		legend = append(legend, legendEntry{names[id], []plot.Thumbnailer{b}})
	}
	target, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: TargetMemoryNs}, {X: float64(len(workloads)) - 0.5, Y: TargetMemoryNs}})
	if err != nil {
		return nil, nil, err
	}
	target.Color, target.Width, target.Dashes = color.Black, vg.Points(1), []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(target)
	legend = append(legend, legendEntry{fmt.Sprintf("target: %d ns", TargetMemoryNs), []plot.Thumbnailer{target}})
	p.NominalX(workloads...)
	p.X.Min, p.X.Max = -0.5, float64(len(workloads))-0.5
	return p, legend, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
