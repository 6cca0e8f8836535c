package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartSeries is one side's curve: its name, colour and the figure at each level.
type chartSeries struct {
	name  string
	color color.Color
	value func(levelResult) float64
}

var (
	colorReceiver    = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // blue
	colorHandwritten = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff} // orange
	colorPgbench     = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff} // green
)

// writeChart draws accepted/s and p99 latency against requests in flight for the
// receiver, the hand-written handler and pgbench, side by side, as an SVG at path (or
// PNG, PDF, ... by its extension).
func writeChart(path string, levels []levelResult) error {
	if len(levels) == 0 {
		return nil
	}
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	throughput, err := levelPlot("Throughput", "accepted/s (pgbench: tps)", levels, []chartSeries{
		{"receiver", colorReceiver, func(lv levelResult) float64 { return lv.rx.acceptedPerSec() }},
		{"hand-written", colorHandwritten, func(lv levelResult) float64 { return lv.hw.acceptedPerSec() }},
		{"pgbench", colorPgbench, func(lv levelResult) float64 { return lv.pg.TPS }},
	})
	if err != nil {
		return err
	}
	latency, err := levelPlot("Latency p99", "ms", levels, []chartSeries{
		{"receiver", colorReceiver, func(lv levelResult) float64 { return msOf(lv.rx.p99) }},
		{"hand-written", colorHandwritten, func(lv levelResult) float64 { return msOf(lv.hw.p99) }},
		{"pgbench", colorPgbench, func(lv levelResult) float64 { return msOf(lv.pg.P99) }},
	})
	if err != nil {
		return err
	}

	// SVG unless the path asks for another format gonum/plot writes (png, pdf, ...).
	format := strings.TrimPrefix(filepath.Ext(path), ".")
	if format == "" {
		format = "svg"
	}
	canvas, err := draw.NewFormattedCanvas(24*vg.Centimeter, 9*vg.Centimeter, format)
	if err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	plots := [][]*plot.Plot{{throughput, latency}}
	cells := plot.Align(plots, tiles, draw.New(canvas))
	throughput.Draw(cells[0][0])
	latency.Draw(cells[0][1])

	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create chart directory: %w", err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create chart: %w", err)
	}
	if _, err := canvas.WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return nil
}

// levelPlot is one panel: a line with points per series over the levels, requests in
// flight on a log2 axis ticked at the measured levels.
func levelPlot(title, yLabel string, levels []levelResult, series []chartSeries) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "requests in flight (pgbench: clients)"
	p.Y.Label.Text = yLabel
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, lv := range levels {
		ticks = append(ticks, plot.Tick{Value: float64(lv.concurrency), Label: strconv.Itoa(lv.concurrency)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(levels) == 1 {
		c := float64(levels[0].concurrency)
		p.X.Min, p.X.Max = c/2, c*2
	}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	for i, s := range series {
		xys := make(plotter.XYs, len(levels))
		for j, lv := range levels {
			xys[j] = plotter.XY{X: float64(lv.concurrency), Y: s.value(lv)}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("chart %s, %s: %w", title, s.name, err)
		}
		line.Color = s.color
		line.Width = vg.Points(1.5)
		points.Color = s.color
		points.Shape = [...]draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}}[i%3]
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	return p, nil
}
