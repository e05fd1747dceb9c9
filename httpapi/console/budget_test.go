package console_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/pipeline"
)

// Ensure a page that reads its budget of events before it has a page
// of matches stops there and offers the next page from the last event it
// read, and that following those pages gives every match once, as the
// CLI lists them (or in the reverse order, newest first): a filter that matches little answers in pages, not in
// one long wait.
func TestEvents_ScanBudgetPages(t *testing.T) {
	s := MustServe(t)
	now := time.Now()
	var events []*auditlog.Event
	for i := range 40 {
		p := "agent"
		if i%9 == 4 {
			p = "rare"
		}
		events = append(events, event(now, p, "create_record", "key-"+strconv.Itoa(i)))
	}
	s.Append(events...)
	base := serveConsole(t, console.Config{Log: s.Log(), ScanBudget: 10,
		SignIn: func(context.Context, string) (pipeline.Caller, error) {
			return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
		}})
	b := newBrowser(t, base)
	b.SignIn("t")
	want, _, _ := s.Log().List(context.Background(), auditlog.Filter{Principal: "rare"}, 0, 100)
	var wantSeqs []string
	for _, e := range want {
		wantSeqs = append(wantSeqs, strconv.FormatUint(e.Seq, 10))
	}
	for _, order := range []string{"newest", "oldest"} {
		var got []string
		path, pages, stopped := "/ui/events?principal=rare&order="+order, 0, 0
		for path != "" {
			p := b.Get(path)
			mustPage(t, p, http.StatusOK, "events")
			if r := rows(p.Body); len(r) > 2 {
				t.Fatalf("%s first: a page of a budget of 10 events shows %v", order, r)
			}
			if strings.Contains(p.Body, "and stopped there") {
				stopped++
			}
			got = append(got, rows(p.Body)...)
			path = next(p.Body)
			if pages++; pages > 10 {
				t.Fatalf("%s first: the pages do not end", order)
			}
		}
		want := slices.Clone(wantSeqs)
		if order == "newest" {
			slices.Reverse(want)
		}
		if !slices.Equal(got, want) || len(wantSeqs) != 4 {
			t.Errorf("%s first: the pages gave %v, want %v", order, got, want)
		}
		if stopped < 3 {
			t.Errorf("%s first: %d pages stopped at their budget, want at least 3 of 40 events read 10 at a time", order, stopped)
		}
	}
}
