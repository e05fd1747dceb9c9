package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/httpapi/auditapi"
)

// Bounds of the activity counts.
const (
	// MaxPrincipals is how many principals (and tools, and codes) the
	// counts tell apart; the rest are counted as Other.
	MaxPrincipals = 200
	// TopSeries is how many a chart shows, the rest folded into Other.
	TopSeries = 6
	// Other names what the bounds fold together.
	Other = "other"
	// scanChunk is how many events the count reads a transaction.
	scanChunk = 5000
	// syncBudget is how long a page counts new events itself before it
	// leaves the rest to the background and says how far it got.
	syncBudget = 30 * time.Millisecond
)

// tally is writes and failures.
type tally struct{ OK, Failed int }

func (t *tally) add(e *auditlog.Event) {
	if e.Outcome == auditlog.OK {
		t.OK++
	} else {
		t.Failed++
	}
}

// hour is the counts of one hour (UTC), each dimension's by the index
// of the name (activity.names), so that a page sums slices, not maps.
type hour struct {
	all         tally
	byTool      []tally
	byPrincipal []tally
	codes       []int
}

// Dimensions of the counts.
const (
	dimTool = iota
	dimPrincipal
	dimCode
	dims
)

// activity counts the log's events an hour at a time, incrementally:
// each count reads only the events after those counted.
type activity struct {
	log auditapi.Local

	scan sync.Mutex // one count at a time

	mu      sync.Mutex // guards what follows
	seen    uint64     // the events counted are those up to seen
	counted uint64     // how many events were counted
	hours   map[int64]*hour
	first   time.Time
	ids     [dims]map[string]int // by dimension, the names told apart, and their index
	names   [dims][]string       // by dimension and index
	running bool                 // a background count runs
	// seenOutcome says whether an event of each outcome was counted.
	seenOutcome map[string]bool
	// The background count's start, and how many events were counted
	// then: its rate tells when it will be done.
	started      time.Time
	startCounted uint64
}

func newActivity(log auditapi.Local) *activity {
	a := &activity{log: log, hours: map[int64]*hour{}, seenOutcome: map[string]bool{}}
	for d := range a.ids {
		a.ids[d] = map[string]int{}
	}
	return a
}

// id returns the index of v as counted in dimension dim: its own while
// fewer than MaxPrincipals names were told apart, else Other's. a.mu is
// held.
func (a *activity) id(dim int, v string) int {
	if i, ok := a.ids[dim][v]; ok {
		return i
	}
	if len(a.ids[dim]) >= MaxPrincipals {
		v = Other
		if i, ok := a.ids[dim][v]; ok {
			return i
		}
	}
	i := len(a.names[dim])
	a.ids[dim][v] = i
	a.names[dim] = append(a.names[dim], v)
	return i
}

// held returns the names counted in dimension dim, sorted; Other only
// if a name of that name was counted before the bound. a.mu is held.
func (a *activity) held(dim int) []string {
	names := slices.Clone(a.names[dim])
	if len(names) > MaxPrincipals {
		names = slices.DeleteFunc(names, func(n string) bool { return n == Other })
	}
	slices.Sort(names)
	return names
}

// at returns s's element i, growing s to hold it.
func at[T any](s *[]T, i int) *T {
	if i >= len(*s) {
		*s = append(*s, make([]T, i+1-len(*s))...)
	}
	return &(*s)[i]
}

// add counts events; a.mu is held.
func (a *activity) add(events []*auditlog.Event) {
	for _, e := range events {
		k := e.Time.UTC().Unix() / 3600
		h := a.hours[k]
		if h == nil {
			h = new(hour)
			a.hours[k] = h
		}
		h.all.add(e)
		at(&h.byTool, a.id(dimTool, e.Tool)).add(e)
		at(&h.byPrincipal, a.id(dimPrincipal, e.Principal)).add(e)
		if e.Outcome != auditlog.OK {
			*at(&h.codes, a.id(dimCode, e.Code)) += 1
		}
		if slices.Contains(outcomes, e.Outcome) {
			a.seenOutcome[e.Outcome] = true
		}
		if a.first.IsZero() || e.Time.Before(a.first) {
			a.first = e.Time
		}
		a.seen = e.Seq
		a.counted++
	}
}

// catchUp counts the events after those counted, until none are left
// or budget passed (0: no bound); it reports whether it counted them all.
// Only one count runs at a time; if another runs, it returns at once.
func (a *activity) catchUp(ctx context.Context, budget time.Duration) (bool, error) {
	if !a.scan.TryLock() {
		return false, nil
	}
	defer a.scan.Unlock()
	start := time.Now()
	for {
		a.mu.Lock()
		after := a.seen
		a.mu.Unlock()
		events, next, err := a.log.List(ctx, auditlog.Filter{}, after, scanChunk)
		if err != nil {
			return false, err
		}
		a.mu.Lock()
		a.add(events)
		a.mu.Unlock()
		if next == 0 {
			return true, nil
		}
		if budget > 0 && time.Since(start) > budget {
			return false, nil
		}
	}
}

// background counts the rest in a goroutine of its own, unless one runs.
// It reads until the log has no more; a store that closes ends it with
// its error.
func (a *activity) background() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running {
		return
	}
	a.running = true
	a.started, a.startCounted = time.Now(), a.counted
	go func() {
		defer func() {
			a.mu.Lock()
			a.running = false
			a.mu.Unlock()
		}()
		for {
			done, err := a.catchUp(context.Background(), 0)
			if done || err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // a page's own count held the lock
		}
	}()
}

// window is a range of hours shown, in buckets of a number of hours.
type window struct {
	Name        string
	From        int64 // the first hour, included
	Buckets     int
	BucketHours int64
}

// windows are the Activity page's ranges.
var windows = []string{"24h", "7d", "30d", "all"}

// windowOf returns the range named name, ending with the hour of now.
func (a *activity) windowOf(name string, now time.Time) window {
	end := now.UTC().Unix()/3600 + 1 // the hour after now's
	switch name {
	case "24h":
		return window{Name: name, From: end - 24, Buckets: 24, BucketHours: 1}
	case "7d":
		return window{Name: name, From: end - 7*24, Buckets: 28, BucketHours: 6}
	case "all":
		a.mu.Lock()
		first := a.first
		a.mu.Unlock()
		from := end - 24
		if !first.IsZero() && first.Unix()/3600 < from {
			from = first.UTC().Unix() / 3600
		}
		span := end - from
		bh := max(1, (span+59)/60)
		n := (span + bh - 1) / bh
		return window{Name: name, From: end - n*bh, Buckets: int(n), BucketHours: bh}
	}
	return window{Name: "30d", From: end - 30*24, Buckets: 30, BucketHours: 24}
}

// series is one line of a chart: a name and its count in each bucket.
type series struct {
	Name   string
	Counts []int
	Total  int
}

// summary is the counts of a window: by bucket, by tool and by principal
// (writes and failures), the failure codes, and the totals.
type summary struct {
	Window          window
	Outcomes        []series // ok, failed
	Tools           []series // top TopSeries, then Other
	Principals      []series
	Codes           []series // one bucket: the window's total
	ToolTotals      []total
	PrincipalTotals []total
	CodeTotals      []total
	All             tally
}

// total is one name's writes and failures in the window.
type total struct {
	Name       string
	OK, Failed int
}

// summarize sums the counts of w.
func (a *activity) summarize(w window) summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := summary{Window: w}
	ok, failed := make([]int, w.Buckets), make([]int, w.Buckets)
	tools, principals := make([][]int, len(a.names[dimTool])), make([][]int, len(a.names[dimPrincipal]))
	toolT, principalT := make([]tally, len(tools)), make([]tally, len(principals))
	codes := make([]int, len(a.names[dimCode]))
	for i := range w.Buckets {
		for k := w.From + int64(i)*w.BucketHours; k < w.From+int64(i+1)*w.BucketHours; k++ {
			h := a.hours[k]
			if h == nil {
				continue
			}
			ok[i] += h.all.OK
			failed[i] += h.all.Failed
			s.All.OK += h.all.OK
			s.All.Failed += h.all.Failed
			for _, d := range []struct {
				from   []tally
				counts [][]int
				totals []tally
			}{{h.byTool, tools, toolT}, {h.byPrincipal, principals, principalT}} {
				for id, t := range d.from {
					if t == (tally{}) {
						continue
					}
					if d.counts[id] == nil {
						d.counts[id] = make([]int, w.Buckets)
					}
					d.counts[id][i] += t.OK + t.Failed
					d.totals[id].OK += t.OK
					d.totals[id].Failed += t.Failed
				}
			}
			for id, n := range h.codes {
				codes[id] += n
			}
		}
	}
	s.Outcomes = []series{{Name: "ok", Counts: ok, Total: s.All.OK}, {Name: "failed", Counts: failed, Total: s.All.Failed}}
	s.Tools, s.ToolTotals = top(a.names[dimTool], tools, toolT, w.Buckets)
	s.Principals, s.PrincipalTotals = top(a.names[dimPrincipal], principals, principalT, w.Buckets)
	for id, n := range codes {
		if n > 0 {
			s.CodeTotals = append(s.CodeTotals, total{Name: a.names[dimCode][id], Failed: n})
		}
	}
	sortTotals(s.CodeTotals)
	for _, t := range s.CodeTotals {
		s.Codes = append(s.Codes, series{Name: t.Name, Counts: []int{t.Failed}, Total: t.Failed})
	}
	return s
}

// top returns the TopSeries largest series, then the rest folded into
// Other, and every name's totals, largest first.
func top(names []string, byID [][]int, totalsByID []tally, buckets int) ([]series, []total) {
	var all []total
	counts := map[string][]int{}
	for id, t := range totalsByID {
		if t != (tally{}) {
			all = append(all, total{Name: names[id], OK: t.OK, Failed: t.Failed})
			counts[names[id]] = byID[id]
		}
	}
	sortTotals(all)
	var out []series
	var other *series
	for i, t := range all {
		if i < TopSeries && t.Name != Other {
			out = append(out, series{Name: t.Name, Counts: counts[t.Name], Total: t.OK + t.Failed})
			continue
		}
		if other == nil {
			other = &series{Name: Other, Counts: make([]int, buckets)}
		}
		for j, n := range counts[t.Name] {
			other.Counts[j] += n
		}
		other.Total += t.OK + t.Failed
	}
	if other != nil {
		out = append(out, *other)
	}
	return out, all
}

// sortTotals sorts largest first, then by name.
func sortTotals(ts []total) {
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i].OK+ts[i].Failed, ts[j].OK+ts[j].Failed
		if a != b {
			return a > b
		}
		return ts[i].Name < ts[j].Name
	})
}

// activityPage is the Activity page.
type activityPage struct {
	base
	Windows  []string
	Window   string
	Fitted   bool // no range was asked for: the page chose it from the log
	From, To time.Time
	Charts   []chart
	Summary  summary
	Counted  uint64 // events counted so far
	Size     uint64 // the log's size
	Counting bool   // the count has not caught up yet
	Done     string // when the count will be done, as a sentence
}

// fittedWindow is the range the Activity page shows when none is asked
// for: the whole log, in bars from its first event, while it is younger
// than 30 days (a day-old log is not one bar at the right of 30 days),
// else the last 30 days.
func (a *activity) fittedWindow(now time.Time) string {
	a.mu.Lock()
	first := a.first
	a.mu.Unlock()
	if !first.IsZero() && now.Sub(first) > 30*24*time.Hour {
		return "30d"
	}
	return "all"
}

// eta says when the background count will be done, at the rate it has
// counted since it began, and in how many seconds the page should look
// again: at that time, but at least 1 and at most 10 seconds from now.
func (a *activity) eta(size uint64, now time.Time) (string, int) {
	a.mu.Lock()
	left, counted, elapsed := size-min(size, a.seen), a.counted-a.startCounted, time.Since(a.started)
	a.mu.Unlock()
	if counted == 0 || elapsed <= 0 {
		return "It will be done in a few seconds.", 2
	}
	d := time.Duration(float64(elapsed) / float64(counted) * float64(left)).Round(time.Second)
	at := now.Add(d).UTC().Format("15:04:05")
	return fmt.Sprintf("At its rate so far it will be done in about %s (at %s UTC); this page reloads itself until then.", max(d, time.Second), at),
		int(min(max(d, time.Second), 10*time.Second) / time.Second)
}

// activityPage serves the charts of a window: 24h, 7d, 30d or all; with
// none asked for, the one fitted to the log (fittedWindow).
func (c *Console) activityPage(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.URL.Query().Get("range")
	if name != "" && !slices.Contains(windows, name) {
		c.fail(w, r, s, http.StatusBadRequest, "The parameter range takes 24h, 7d, 30d or all.")
		return
	}
	a := c.activity
	done, err := a.catchUp(r.Context(), syncBudget)
	if err != nil {
		c.failRead(w, r, s, err)
		return
	}
	if !done {
		a.background()
	}
	size, err := c.cfg.Log.Size(r.Context())
	if err != nil {
		c.failRead(w, r, s, err)
		return
	}
	now := c.cfg.Now()
	fitted := name == ""
	if fitted {
		name = a.fittedWindow(now)
	}
	win := a.windowOf(name, now)
	sum := a.summarize(win)
	a.mu.Lock()
	counted, seen := a.counted, a.seen
	a.mu.Unlock()
	p := activityPage{base: base{Page: "activity", Title: "Activity", Principal: s.principal}, Windows: windows, Window: win.Name, Fitted: fitted,
		From: time.Unix(win.From*3600, 0).UTC(), To: time.Unix((win.From+int64(win.Buckets)*win.BucketHours)*3600, 0).UTC(),
		Summary: sum, Counted: counted, Size: size, Counting: seen < size}
	if p.Counting {
		p.Done, p.Refresh = a.eta(size, now)
	}
	p.Charts = []chart{
		barChart("by-tool", "Writes by tool", win, sum.Tools),
		barChart("by-principal", "Writes by principal", win, sum.Principals),
		barChart("outcomes", "Writes and failures", win, sum.Outcomes),
		codeChart("codes", "Failures by code", sum.Codes),
	}
	c.render(w, r, http.StatusOK, "activity", p)
}
