// Package chart holds the gonum/plot helpers shared by floodgate's figures
// (floodgate simulate, and the peer benchmark in the bench module): one look
// and one way of writing PNG and SVG files.
package chart

import (
	"io"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PNGDPI makes the PNGs sharp on high-density screens.
const PNGDPI = 150

// Sans sets every text of p in the sans-serif variant of the plot's font
// (Liberation Sans), which reads better in charts than the default serif.
func Sans(p *plot.Plot) {
	for _, f := range []*font.Font{
		&p.Title.TextStyle.Font, &p.Legend.TextStyle.Font,
		&p.X.Label.TextStyle.Font, &p.X.Tick.Label.Font,
		&p.Y.Label.TextStyle.Font, &p.Y.Tick.Label.Font,
	} {
		f.Variant = "Sans"
	}
}

// NewCanvas returns a w x h canvas to draw on and the writer that encodes it,
// as PNG (at PNGDPI) or SVG after path's extension.
func NewCanvas(path string, w, h vg.Length) (vg.CanvasSizer, io.WriterTo) {
	if filepath.Ext(path) == ".png" {
		img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(PNGDPI))
		return img, vgimg.PngCanvas{Canvas: img}
	}
	svg := vgsvg.New(w, h)
	return svg, svg
}

// WriteFile writes what out encodes to path.
func WriteFile(path string, out io.WriterTo) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = out.WriteTo(f)
	return err
}
