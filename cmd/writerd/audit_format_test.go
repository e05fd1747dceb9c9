package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/bolttest"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// formatLog is a log that mixes event formats, as a store an earlier
// writerd wrote and this one went on with: two events of format 1 stored
// as that writerd stored them (bolttest.AppendEarlier, or
// pgtest.AppendEarlier on PostgreSQL), then, of the current format, a write to an
// upstream whose outcome is unknown, the operator's resolution of it, and
// an ok write, all covered by a checkpoint.
type formatLog struct {
	store   testStore
	earlier []string // the format-1 events' stored bytes
	first   uint64   // the sequence number of the first event of the current format
}

func mustFormatLog(t testing.TB, kind storeKind) formatLog {
	t.Helper()
	ts := kind.make(t)
	key, err := auditlog.LoadKey(ts.keyFile(), daemon.NewLogOrigin(), true)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ts.config()
	if ts.URL != "" {
		cfg.Origin = key.Signer.Name()
	}
	open := func() daemon.Store {
		s, err := daemon.OpenStore(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Now().Add(-time.Hour)
	event := func(tool, outcome, k string) *auditlog.Event {
		return &auditlog.Event{Time: now, RequestID: "req-" + k, Principal: "ci-agent", Transport: "http", Tool: tool,
			IdempotencyKey: k, Digest: strings.Repeat("ab", 32), Outcome: outcome, DurationMS: 1.5,
			Targets: []auditlog.Target{widget("W1", 1)}}
	}
	l := formatLog{store: ts, first: 3}
	open().Close() // a store of the current layout, with no event yet
	for _, e := range []*auditlog.Event{event("create_widget", auditlog.OK, "k-old-1"), event("update_widget", auditlog.Failed, "k-old-2")} {
		if e.Outcome == auditlog.Failed {
			e.Code, e.Status = "REVISION_CONFLICT", 409
		}
		if ts.URL != "" {
			l.earlier = append(l.earlier, string(pgtest.AppendEarlier(t, ts.URL, e)))
			continue
		}
		bolttest.Update(t, ts.Dir, func(tx bolttest.Tx) error {
			l.earlier = append(l.earlier, string(tx.AppendEarlier(t, e)))
			return nil
		})
	}
	s := open()
	defer s.Close()
	err = s.Update(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		unknown := event("memory_create_entities", auditlog.Unknown, "k-upstream")
		unknown.Code, unknown.Status, unknown.Targets = "OUTCOME_UNKNOWN", 502, nil
		unknown.Upstream = &auditlog.Upstream{Name: "memory", Tool: "create_entities", Attempt: 2, End: "timeout", DurationMS: 30000.5,
			AnswerDigest: strings.Repeat("0f", 32)}
		if err := log.Append(unknown); err != nil {
			return err
		}
		resolution := event("resolve_write_outcome", auditlog.OK, "k-resolve")
		resolution.Principal, resolution.Targets = "ops", nil
		resolution.Resolves = &auditlog.Resolution{Event: unknown.ID, Principal: unknown.Principal, Key: unknown.IdempotencyKey, Finding: "applied"}
		if err := log.Append(resolution); err != nil {
			return err
		}
		last := event("update_widget", auditlog.OK, "k-new")
		return log.Append(last)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Signed in a view that sees the events numbered: a backend may
	// number an event after its transaction (PostgreSQL's sequencer).
	var size uint64
	var signed []byte
	err = s.View(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		var err error
		if size, err = log.Size(); err != nil {
			return err
		}
		root, err := auditlog.TreeHash(log, size)
		if err != nil {
			return err
		}
		signed, err = auditlog.Checkpoint{Origin: key.Signer.Name(), Size: size, Root: root}.Sign(key.Signer)
		return err
	})
	if err == nil {
		err = s.Update(t.Context(), func(tx pipeline.Tx[handlers.Store]) error { return tx.Audit().PutCheckpoint(size, signed) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Ensure a log that mixes event formats, with upstream and resolves
// members and the unknown outcome, reads whole through every audit
// command: verify passes; the events of format 1 come out of list -o jsonl
// and the export byte for byte as stored, without a format member, the
// later ones with theirs; --outcome unknown selects the unknown write; the
// table names its upstream; show prints every member; and the export
// verifies offline.
func TestAudit_EventFormats(t *testing.T) { eachStore(t, testAuditEventFormats) }

func testAuditEventFormats(t *testing.T, kind storeKind) {
	l := mustFormatLog(t, kind)
	s := l.store
	upstreamSeq, resolutionSeq := l.first, l.first+1
	mustVerifyPasses(t, s.auditFlags()...)

	r := mustAudit(t, nil, append([]string{"list", "-o", "jsonl"}, s.storeFlags()...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != int(l.first)+2 {
		t.Fatalf("list -o jsonl: exit %d, %d lines\n%s%s", r.code, len(lines), r.stdout, r.stderr)
	}
	for i, want := range l.earlier {
		if lines[i] != want {
			t.Errorf("event %d of format 1 is listed as\n%s\nwant its stored bytes\n%s", i+1, lines[i], want)
		}
	}
	for _, line := range lines[l.first-1:] {
		if !strings.Contains(line, `"format":3,`) {
			t.Errorf("an event appended now is listed without its format: %s", line)
		}
	}
	if up := lines[upstreamSeq-1]; !strings.Contains(up, `"outcome":"unknown"`) ||
		!strings.Contains(up, `"upstream":{"answer_digest":"`+strings.Repeat("0f", 32)+`","attempt":2,"duration_ms":30000.5,"end":"timeout","name":"memory","tool":"create_entities"}`) {
		t.Errorf("the upstream event is listed as %s", up)
	}
	if res := lines[resolutionSeq-1]; !strings.Contains(res, `"resolves":{"event":"`) || !strings.Contains(res, `"finding":"applied","key":"k-upstream","principal":"ci-agent"}`) {
		t.Errorf("the resolution is listed as %s", res)
	}

	r = mustAudit(t, nil, append([]string{"list", "--outcome", "unknown", "-o", "jsonl"}, s.storeFlags()...)...)
	if got := seqsOf(t, r.stdout); r.code != 0 || len(got) != 1 || got[0] != upstreamSeq {
		t.Errorf("list --outcome unknown: exit %d, events %v, want [%d]\n%s", r.code, got, upstreamSeq, r.stderr)
	}
	r = mustAudit(t, nil, append([]string{"list"}, s.storeFlags()...)...)
	table := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(table) != len(lines)+1 || !strings.Contains(table[0], " KEY ") || !strings.Contains(table[0], " UPSTREAM ") {
		t.Fatalf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	col := strings.Index(table[0], "UPSTREAM")
	for i, row := range table[1:] {
		want := "-"
		if uint64(i+1) == upstreamSeq {
			want = "memory"
			if !strings.Contains(row, " unknown ") || !strings.Contains(row, " OUTCOME_UNKNOWN ") {
				t.Errorf("the table's row of the unknown write: %q", row)
			}
		}
		if got, _, _ := strings.Cut(row[col:], " "); got != want {
			t.Errorf("the table's row %d names upstream %q, want %q: %q", i+1, got, want, row)
		}
	}

	show := func(ref string) string {
		t.Helper()
		r := mustAudit(t, nil, append([]string{"show", ref}, s.auditFlags()...)...)
		if r.code != 0 || !strings.Contains(r.stdout, "inclusion:        included in the signed tree of size ") {
			t.Fatalf("show %s: exit %d\n%s%s", ref, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	up := show(strconv.FormatUint(upstreamSeq, 10))
	for _, want := range []string{
		"outcome:          unknown\n", "format:           3\n",
		"upstream:         name memory\n                  tool create_entities\n                  attempt 2\n                  end timeout\n" +
			"                  duration_ms 30000.5\n                  answer_digest " + strings.Repeat("0f", 32) + "\n",
	} {
		if !strings.Contains(up, want) {
			t.Errorf("show of the upstream event holds no %q:\n%s", want, up)
		}
	}
	var upstreamID string
	for line := range strings.SplitSeq(up, "\n") {
		if v, ok := strings.CutPrefix(line, "id:               "); ok {
			upstreamID = v
		}
	}
	if res := show(strconv.FormatUint(resolutionSeq, 10)); !strings.Contains(res, "resolves:         event "+upstreamID+"\n                  principal ci-agent\n                  key k-upstream\n                  finding applied\n") || upstreamID == "" {
		t.Errorf("show of the resolution does not name event %q:\n%s", upstreamID, res)
	}
	if old := show("1"); !strings.Contains(old, "format:           1\n") || strings.Contains(old, "upstream:") {
		t.Errorf("show of an event of format 1:\n%s", old)
	}
	for seq := uint64(1); seq <= uint64(len(lines)); seq++ {
		r := mustAudit(t, nil, append([]string{"show", strconv.FormatUint(seq, 10), "-o", "json"}, s.auditFlags()...)...)
		var shown struct {
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || string(shown.Event) != lines[seq-1] {
			t.Errorf("show %d -o json: %v, event %s, want the stored bytes %s", seq, err, shown.Event, lines[seq-1])
		}
	}

	// The export carries every event's stored bytes, and verifies with no
	// store at all.
	files := t.TempDir()
	vkey, export := filepath.Join(files, "writerd.vkey"), filepath.Join(files, "audit.jsonl")
	r = mustAudit(t, nil, append([]string{"key"}, s.auditFlags()...)...)
	os.WriteFile(vkey, []byte(r.stdout), 0o600)
	if r := mustAudit(t, nil, append([]string{"export", "-o", export}, s.auditFlags()...)...); r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.SplitN(string(b), "\n", 2)[1]; got != strings.Join(lines, "\n")+"\n" {
		t.Errorf("the export's events:\n%s\nwant the stored bytes:\n%s", got, strings.Join(lines, "\n"))
	}
	mustVerifyPasses(t, "--export", export, "--key", vkey)
}

// Ensure a log that holds an event of a later format than this writerd
// reads (a newer writerd appended it) is never shown with members
// missing: list, show and tail refuse with the sentence naming the event
// and its format, while verify, which hashes the stored bytes, passes,
// and the export carries the event's bytes.
func TestAudit_LaterFormat(t *testing.T) {
	l := mustFormatLog(t, boltStores)
	s := l.store
	r := mustAudit(t, nil, append([]string{"list", "-o", "jsonl"}, s.storeFlags()...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	last := lines[len(lines)-1]
	seq := uint64(len(lines)) + 1
	var prev auditlog.Event
	if err := json.Unmarshal([]byte(last), &prev); err != nil {
		t.Fatal(err)
	}
	later := strings.NewReplacer(`"format":3,`, `"format":4,"future":{"x":1},`,
		`"seq":`+strconv.FormatUint(seq-1, 10)+`,`, `"seq":`+strconv.FormatUint(seq, 10)+`,`,
		prev.ID, prev.ID[:10]+"ZZZZZZZZZZZZZZZZ").Replace(last)
	bolttest.Update(t, s.Dir, func(tx bolttest.Tx) error {
		tx.AppendCanonical(t, []byte(later))
		return nil
	})
	says := "event " + strconv.FormatUint(seq, 10) + " is of format 4, which this writerd does not read (it reads event formats 1 to 3): read the log with a writerd of that format or later; writerd audit verify checks the log meanwhile\n"
	for _, args := range [][]string{{"list"}, {"list", "-o", "jsonl"}, {"show", strconv.FormatUint(seq, 10)}, {"tail"}} {
		r := mustAudit(t, nil, append(args, s.auditFlags()...)...)
		if r.code != 1 || r.stderr != "writerd: "+says {
			t.Errorf("%s: exit %d, stderr %q, want 1 and %q\n%s", strings.Join(args, " "), r.code, r.stderr, says, r.stdout)
		}
	}
	mustVerifyPasses(t, s.auditFlags()...)
	export := filepath.Join(t.TempDir(), "audit.jsonl")
	if r := mustAudit(t, nil, append([]string{"export", "-o", export}, s.auditFlags()...)...); r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	// The export ends at the checkpoint, before the later event: what it
	// holds verifies.
	if b, err := os.ReadFile(export); err != nil || strings.Count(string(b), "\n") != len(lines)+1 {
		t.Errorf("the export: %v\n%s", err, b)
	}
}
