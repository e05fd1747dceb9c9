package console

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
)

// appendSpread appends n events to st, spread over the hours before now,
// of more principals than the counts tell apart, several tools, and
// failures of several codes.
func appendSpread(t *testing.T, st pipeline.Storage[handlers.Store], from, n int, now time.Time) {
	t.Helper()
	tools := []string{"create_record", "update_record", "delete_records", "create_project"}
	codes := []string{"REVISION_CONFLICT", "NOT_FOUND", "INTERNAL"}
	err := st.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
		for i := from; i < from+n; i++ {
			e := &auditlog.Event{
				// Oldest first: times never decrease along the log.
				Time:      now.Add(-time.Duration(from+n-i) * 7 * time.Minute),
				RequestID: fmt.Sprintf("req-%d", i), Principal: fmt.Sprintf("agent-%03d", (i*7)%(MaxPrincipals+25)),
				Transport: "http", Tool: tools[i%len(tools)], IdempotencyKey: fmt.Sprintf("key-%d", i), Digest: "sha256:00",
				Outcome: auditlog.OK, Targets: []auditlog.Target{},
			}
			if i%5 == 0 {
				e.Outcome, e.Code = auditlog.Failed, codes[i%len(codes)]
			}
			if err := tx.Audit().Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// directCounts counts the events at or after since as the activity must:
// by tool, by principal (the first MaxPrincipals told apart, in the
// log's order, the rest as Other) and by failure code.
func directCounts(t *testing.T, log auditapi.Local, since time.Time) (tools, principals map[string]tally, codes map[string]int, all tally) {
	t.Helper()
	tools, principals, codes = map[string]tally{}, map[string]tally{}, map[string]int{}
	named := map[string]bool{}
	err := log.Log.View(context.Background(), func(r auditlog.Reader) error {
		return auditlog.All(r, func(e *auditlog.Event) error {
			p := e.Principal
			if !named[p] {
				if len(named) < MaxPrincipals {
					named[p] = true
				} else {
					p = Other
				}
			}
			if e.Time.Before(since) {
				return nil
			}
			for m, k := range map[*map[string]tally]string{&tools: e.Tool, &principals: p} {
				c := (*m)[k]
				c.add(e)
				(*m)[k] = c
			}
			all.add(e)
			if e.Outcome != auditlog.OK {
				codes[e.Code]++
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return tools, principals, codes, all
}

func totalsMap(ts []total) map[string]tally {
	m := map[string]tally{}
	for _, t := range ts {
		m[t.Name] = tally{t.OK, t.Failed}
	}
	return m
}

// Ensure the activity counts equal a direct count over the events, by
// tool, by principal (folded beyond MaxPrincipals, as documented) and by
// code, over the whole log and over the last 24 hours; that counting
// again after more events adds only those (no event twice); and that the
// charts' bars add up to the counts.
func TestActivity_CountsAsTheEvents(t *testing.T) {
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := auditapi.Local{Log: pipeline.AuditStorage[handlers.Store](st)}
	now := time.Now()
	appendSpread(t, st, 0, 900, now.Add(-time.Hour))
	a := newActivity(log)
	check := func(stage string, size uint64) {
		t.Helper()
		if done, err := a.catchUp(context.Background(), 0); err != nil || !done {
			t.Fatalf("%s: catchUp = %v, %v", stage, done, err)
		}
		if a.counted != size || a.seen != size {
			t.Fatalf("%s: counted %d events up to %d, want each of %d once", stage, a.counted, a.seen, size)
		}
		for _, name := range []string{"all", "24h"} {
			w := a.windowOf(name, now)
			tools, principals, codes, all := directCounts(t, log, time.Unix(w.From*3600, 0))
			s := a.summarize(w)
			if s.All != all {
				t.Errorf("%s, %s: %+v in all, want %+v", stage, name, s.All, all)
			}
			if got := totalsMap(s.ToolTotals); !maps.Equal(got, tools) {
				t.Errorf("%s, %s: by tool %v, want %v", stage, name, got, tools)
			}
			if got := totalsMap(s.PrincipalTotals); !maps.Equal(got, principals) {
				t.Errorf("%s, %s: by principal %d names, want %d", stage, name, len(got), len(principals))
			}
			got := map[string]int{}
			for _, c := range s.CodeTotals {
				got[c.Name] = c.Failed
			}
			if !maps.Equal(got, codes) {
				t.Errorf("%s, %s: codes %v, want %v", stage, name, got, codes)
			}
			for _, ss := range [][]series{s.Tools, s.Principals, s.Outcomes} {
				sum := 0
				for _, x := range ss {
					for _, n := range x.Counts {
						sum += n
					}
				}
				if sum != all.OK+all.Failed {
					t.Errorf("%s, %s: the bars add up to %d, want %d", stage, name, sum, all.OK+all.Failed)
				}
			}
			if len(s.Principals) > TopSeries+1 || s.Principals[len(s.Principals)-1].Name != Other {
				t.Errorf("%s, %s: %d principal series, want the top %d and %s", stage, name, len(s.Principals), TopSeries, Other)
			}
		}
	}
	check("first", 900)
	if _, ok := totalsMap(a.summarize(a.windowOf("all", now)).PrincipalTotals)[Other]; !ok {
		t.Fatal("more principals than MaxPrincipals, and none folded into other")
	}
	appendSpread(t, st, 900, 300, now)
	check("after more events", 1200)
	if names := slices.Collect(maps.Keys(a.ids[dimPrincipal])); len(names) != MaxPrincipals+1 {
		t.Errorf("%d principals told apart, want the bound %d and %s", len(names), MaxPrincipals, Other)
	}
}

// Ensure a session keeps the caller's principal, scopes and times, and
// nothing of the token it was signed in with; and that the store is
// keyed by the id's hash, never the id itself.
func TestSessions_HoldNoToken(t *testing.T) {
	token := "wrd_" + "SECRETSECRETSECRETSECRETSECRETSECRETSECRET1"
	c := New(Config{SignIn: func(_ context.Context, tok string) (pipeline.Caller, error) {
		if tok != token {
			t.Fatalf("SignIn got %q", tok)
		}
		return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
	}})
	mux := http.NewServeMux()
	c.Register(mux)
	r := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	cs := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || len(cs) != 1 || c.sessions.len() != 1 {
		t.Fatalf("sign-in: %d, cookies %v, %d sessions", w.Code, cs, c.sessions.len())
	}
	id := cs[0].Value
	for k, s := range c.sessions.byID {
		dump := fmt.Sprintf("%#v %x %s", *s, k, k[:])
		if strings.Contains(dump, id) || strings.Contains(dump, token) || strings.Contains(dump, "SECRET") {
			t.Fatalf("the store holds the id or a token: %s", dump)
		}
		if s.principal != "auditor" || s.scopes != pipeline.ScopeAudit || !s.expires.Equal(s.created.Add(DefaultSessionTTL)) {
			t.Fatalf("session %+v", *s)
		}
	}
}

// Ensure a page shown while the count has not caught up says how far it
// got, when it will be done and reloads itself (a meta refresh, no
// script), and that once the count is done the page neither says so nor
// reloads; and that the estimate is the rate so far.
func TestActivity_PartialCountSaysWhenAndReloads(t *testing.T) {
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := auditapi.Local{Log: pipeline.AuditStorage[handlers.Store](st)}
	appendSpread(t, st, 0, 300, time.Now())
	c := New(Config{Log: log, SignIn: func(context.Context, string) (pipeline.Caller, error) {
		return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
	}})
	mux := http.NewServeMux()
	c.Register(mux)
	r := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader("token=t"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	cookie := w.Result().Cookies()[0]
	get := func() string {
		r := httptest.NewRequest(http.MethodGet, "/ui/activity", nil)
		r.AddCookie(cookie)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("/ui/activity: %d", w.Code)
		}
		return w.Body.String()
	}
	// Another count holds the log: this page counts nothing itself.
	c.activity.scan.Lock()
	body := get()
	for _, want := range []string{`<meta http-equiv="refresh" content="2">`, `<strong id="counting">Counted 0 of the log's 300 events so far`,
		`<span id="counting-done">It will be done in a few seconds.</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("while counting, no %s:\n%s", want, body)
		}
	}
	c.activity.scan.Unlock()
	for c.activity.mu.Lock(); c.activity.running; c.activity.mu.Lock() {
		c.activity.mu.Unlock()
		time.Sleep(10 * time.Millisecond) // the background count, done
	}
	c.activity.mu.Unlock()
	if body := get(); strings.Contains(body, `http-equiv="refresh"`) || strings.Contains(body, `id="counting"`) {
		t.Errorf("once counted, the page still says it counts or reloads:\n%s", body)
	}

	// The estimate: 1000 events counted in 2 s leave 3000 for 6 s more.
	a := &activity{seen: 1000, counted: 1000, started: time.Now().Add(-2 * time.Second)}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	done, refresh := a.eta(4000, now)
	if !strings.Contains(done, "in about 6s (at 12:00:06 UTC)") || refresh != 6 {
		t.Errorf("eta of 3000 events at 500 a second: %q, refresh %d; want about 6s, at 12:00:06, refresh 6", done, refresh)
	}
	a = &activity{seen: 10, counted: 10, started: time.Now().Add(-10 * time.Second)}
	if _, refresh := a.eta(4000, now); refresh != 10 {
		t.Errorf("a long count reloads every %d s, want at most every 10", refresh)
	}
}
