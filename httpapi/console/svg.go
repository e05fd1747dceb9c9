package console

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A chart is drawn on the server as inline SVG, with presentation
// attributes and classes only (the CSP allows no style attribute): no
// chart library, no script. The template writes it; every text in it is
// template data.
type chart struct {
	Name, Title   string // data-chart, and the heading
	Width, Height int
	Rects         []rect
	Paths         []path
	Texts         []text
	Lines         []line
	Legend        []legendEntry
	Empty         bool
}

type rect struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// path is a series' bars as one path, so that a chart of many bars is a
// few elements: the page stays small, and quick to write.
type path struct {
	D, Class, Title string
}

type text struct {
	X, Y   float64
	Anchor string // start, middle, end
	Class  string
	Text   string
}

type line struct{ X1, Y1, X2, Y2 float64 }

type legendEntry struct {
	Class, Name string
	Total       int
}

// Geometry of the bar charts.
const (
	chartW, chartH         = 720, 220
	padL, padR, padT, padB = 56, 8, 10, 28
)

// seriesClass is the class of the i-th series: s0… for the top ones, the
// Other series its own, ok and failed theirs.
func seriesClass(chart string, i int, name string) string {
	switch {
	case chart == "outcomes" && (name == "ok" || name == "failed"):
		return "s-" + name
	case name == Other:
		return "s-other"
	}
	return "s" + strconv.Itoa(i)
}

// niceMax returns the top of a scale for n in four steps, each 1, 2 or 5
// times a power of ten, so that every tick is a whole number.
func niceMax(n int) int {
	step := 1
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if step = m * p; 4*step >= n {
				return 4 * step
			}
		}
	}
}

// barChart draws the series as stacked bars, one a bucket of the window.
func barChart(name, title string, w window, ss []series) chart {
	c := chart{Name: name, Title: title, Width: chartW, Height: chartH}
	most := 0
	for b := range w.Buckets {
		sum := 0
		for _, s := range ss {
			sum += s.Counts[b]
		}
		most = max(most, sum)
	}
	c.Empty = most == 0
	top := niceMax(most)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	y := func(n int) float64 { return padT + plotH - plotH*float64(n)/float64(top) }
	for i := 0; i <= 4; i++ {
		v := top * i / 4
		c.Lines = append(c.Lines, line{padL, y(v), chartW - padR, y(v)})
		c.Texts = append(c.Texts, text{X: padL - 6, Y: y(v) + 4, Anchor: "end", Class: "tick", Text: strconv.Itoa(v)})
	}
	bw := plotW / float64(w.Buckets)
	every := max(1, w.Buckets/8)
	ds := make([]strings.Builder, len(ss))
	for b := range w.Buckets {
		start := time.Unix((w.From+int64(b)*w.BucketHours)*3600, 0).UTC()
		x := padL + bw*float64(b)
		stack := 0
		for i, s := range ss {
			n := s.Counts[b]
			if n == 0 {
				continue
			}
			top, bottom := y(stack+n), y(stack)
			bar := max(bw-2, 1)
			fmt.Fprintf(&ds[i], "M%.1f %.1fh%.1fv%.1fh%.1fz", x+1, top, bar, bottom-top, -bar)
			stack += n
		}
		if b%every == 0 {
			label := start.Format("15:04")
			if w.BucketHours >= 24 || start.Hour() == 0 {
				label = start.Format("01-02")
			}
			c.Texts = append(c.Texts, text{X: x + bw/2, Y: chartH - padB + 16, Anchor: "middle", Class: "tick", Text: label})
		}
	}
	for i, s := range ss {
		class := seriesClass(name, i, s.Name)
		if ds[i].Len() > 0 {
			c.Paths = append(c.Paths, path{D: ds[i].String(), Class: class,
				Title: fmt.Sprintf("%s: %d from %s to %s", shown(s.Name), s.Total, formatTime(time.Unix(w.From*3600, 0)), formatTime(time.Unix((w.From+int64(w.Buckets)*w.BucketHours)*3600, 0)))})
		}
		c.Legend = append(c.Legend, legendEntry{Class: class, Name: s.Name, Total: s.Total})
	}
	return c
}

// codeChart draws each failure code's count as a horizontal bar.
func codeChart(name, title string, ss []series) chart {
	const row, labelW = 24, 200
	c := chart{Name: name, Title: title, Width: chartW, Height: max(1, len(ss))*row + 2*padT, Empty: len(ss) == 0}
	most := 0
	for _, s := range ss {
		most = max(most, s.Total)
	}
	plotW := float64(chartW - labelW - 80)
	for i, s := range ss {
		yy := float64(padT + i*row)
		wdt := plotW * float64(s.Total) / float64(max(most, 1))
		c.Texts = append(c.Texts, text{X: labelW - 8, Y: yy + 16, Anchor: "end", Class: "label", Text: shown(s.Name)})
		c.Rects = append(c.Rects, rect{X: labelW, Y: yy + 3, W: max(wdt, 1), H: row - 6, Class: "s-failed",
			Title: fmt.Sprintf("%s: %d failures", shown(s.Name), s.Total)})
		c.Texts = append(c.Texts, text{X: labelW + wdt + 6, Y: yy + 16, Anchor: "start", Class: "tick", Text: strconv.Itoa(s.Total)})
	}
	if c.Empty {
		c.Texts = append(c.Texts, text{X: chartW / 2, Y: float64(padT + 16), Anchor: "middle", Class: "label", Text: "no failure in this range"})
	}
	return c
}
