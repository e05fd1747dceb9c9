package handlers_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// mustRecords creates n records in the project, titled by title, and
// returns them in id order.
func (e *env) mustRecords(projectID string, n int, title func(i int) string) []*handlers.Record {
	e.t.Helper()
	rs := make([]*handlers.Record, n)
	for i := range n {
		rs[i] = e.CreateRecord(projectID, title(i))
	}
	slices.SortFunc(rs, func(a, b *handlers.Record) int { return strings.Compare(a.ID, b.ID) })
	return rs
}

func numbered(i int) string { return fmt.Sprintf("r%03d", i) }

// lock locks r with update_record and returns it as it is now.
func (e *env) lock(r *handlers.Record) *handlers.Record {
	e.t.Helper()
	return MustOK[handlers.RecordResult](e.t, e.Write("update_record",
		fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":%d,"locked":true}`, r.ProjectID, r.ID, r.Revision))).Record
}

// retitle changes r's title and returns it as it is now.
func (e *env) retitle(r *handlers.Record, title string) *handlers.Record {
	e.t.Helper()
	return MustOK[handlers.RecordResult](e.t, e.Write("update_record",
		fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":%d,"title":%q}`, r.ProjectID, r.ID, r.Revision, title))).Record
}

// mustReadable asserts that each record is stored exactly as given.
func (e *env) mustReadable(rs ...*handlers.Record) {
	e.t.Helper()
	for _, r := range rs {
		got := MustOK[handlers.RecordResult](e.t, e.GetRecord(r.ProjectID, r.ID)).Record
		if got.Revision != r.Revision || got.Title != r.Title || got.Locked != r.Locked {
			e.t.Fatalf("record %s = %+v, want %+v", r.ID, got, r)
		}
	}
}

// mustGone asserts that no record of rs can be read any more.
func (e *env) mustGone(rs ...*handlers.Record) {
	e.t.Helper()
	for _, r := range rs {
		if res := e.GetRecord(r.ProjectID, r.ID); res.Err == nil || res.Err.Code != pipeline.NotFound {
			e.t.Fatalf("record %s is still readable", r.ID)
		}
	}
}

func ids(rs ...*handlers.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func idsJSON(ids []string) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// wireError is the error envelope as every transport sends it.
type wireError struct {
	Error struct {
		Code      pipeline.Code   `json:"code"`
		Message   string          `json:"message"`
		Status    int             `json:"status"`
		Retry     pipeline.Retry  `json:"retry"`
		RequestID string          `json:"request_id"`
		Preview   json.RawMessage `json:"preview"`
		Detail    json.RawMessage `json:"detail"`
	} `json:"error"`
}

// mustWire decodes res's error envelope, refusing members it does not
// define.
func mustWire(t testing.TB, res *pipeline.Result) wireError {
	t.Helper()
	var w wireError
	d := json.NewDecoder(bytes.NewReader(res.ErrorJSON()))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		t.Fatalf("envelope %s: %v", res.ErrorJSON(), err)
	}
	return w
}

// mustPreview asserts a CONFIRMATION_REQUIRED and decodes its preview as
// it reaches the wire, refusing members the issue does not define.
func mustPreview(t testing.TB, res *pipeline.Result) handlers.DeleteRecordsPreview {
	t.Helper()
	err := MustFail(t, res, pipeline.ConfirmationRequired)
	if err.Retry != pipeline.RetrySameKey || err.Status() != 428 {
		t.Fatalf("preview error = %s", res.ErrorJSON())
	}
	var p handlers.DeleteRecordsPreview
	d := json.NewDecoder(bytes.NewReader(mustWire(t, res).Error.Preview))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		t.Fatalf("preview of %s: %v", res.ErrorJSON(), err)
	}
	var members map[string]any
	json.Unmarshal(mustWire(t, res).Error.Preview, &members)
	if got, want := sortedKeys(members), []string{"matched", "more_than_cap", "sample", "would_attempt", "would_refuse"}; !slices.Equal(got, want) {
		t.Fatalf("preview members = %v, want %v", got, want)
	}
	return p
}

func assertPreview(t testing.TB, got handlers.DeleteRecordsPreview, want handlers.DeleteRecordsPreview) {
	t.Helper()
	if got.Matched != want.Matched || got.WouldAttempt != want.WouldAttempt || got.MoreThanCap != want.MoreThanCap ||
		!slices.Equal(got.WouldRefuse, want.WouldRefuse) || !slices.Equal(got.Sample, want.Sample) {
		t.Fatalf("preview = %+v\nwant      %+v", got, want)
	}
}

// mustDeleted decodes a successful delete_records answer, refusing members
// the issue does not define.
func mustDeleted(t testing.TB, res *pipeline.Result) *handlers.DeleteRecordsResult {
	t.Helper()
	return MustOK[handlers.DeleteRecordsResult](t, res)
}

func assertResult(t testing.TB, got *handlers.DeleteRecordsResult, want handlers.DeleteRecordsResult) {
	t.Helper()
	same := got.Attempted == want.Attempted && got.Deleted == want.Deleted && got.Remaining == want.Remaining &&
		slices.Equal(got.DeletedIDs, orNone(want.DeletedIDs)) && slices.Equal(got.NotFound, orNone(want.NotFound)) &&
		len(got.Refused) == len(want.Refused) && (got.Next != "") == (want.Next != "")
	for i := range want.Refused {
		if !same {
			break
		}
		g, w := got.Refused[i], want.Refused[i]
		same = g.Code == w.Code && g.Count == w.Count && slices.Equal(g.IDs, w.IDs)
	}
	if !same {
		t.Fatalf("result = %+v\nwant     %+v", got, want)
	}
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// mustOneOKEvent asserts that key has one audit event, ok, whose targets
// are exactly the records rs at their revisions, in id order.
func (e *env) mustOneOKEvent(key string, rs ...*handlers.Record) {
	e.t.Helper()
	evs := e.AuditEvents(key)
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || evs[0].Tool != "delete_records" {
		e.t.Fatalf("audit events for the key = %+v, want one ok delete_records event", evs)
	}
	want := make([]auditlog.Target, 0, len(rs))
	for _, r := range rs {
		want = append(want, auditlog.Target{Kind: "record", ID: r.ID, Revision: r.Revision})
	}
	if got := evs[0].Targets; !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		e.t.Fatalf("targets = %+v\nwant      %+v", got, want)
	}
}

// Ensure the unconfirmed call is the preview: it deletes nothing, records
// no audit event and leaves the key unused, and its preview says how many
// records match, would be attempted and refused (by code), whether more
// match than one call attempts, and the first 10 ids in attempt order; the
// confirmed call with the same key then runs and does what it said.
func TestDeleteRecords_PreviewDeletesNothing(t *testing.T) {
	for _, form := range []string{"filter", "record_ids"} {
		t.Run(form, func(t *testing.T) {
			e := MustStart(t)
			p := e.CreateProject("alpha")
			rs := e.mustRecords(p.ID, 12, numbered)
			for _, i := range []int{1, 5, 8} {
				rs[i] = e.lock(rs[i])
			}
			// record_ids in an order of the caller's, not id order.
			shuffled := ids(rs...)
			slices.Reverse(shuffled)
			args := fmt.Sprintf(`{"project_id":%q,"filter":{}}`, p.ID)
			if form == "record_ids" {
				args = fmt.Sprintf(`{"project_id":%q,"record_ids":%s}`, p.ID, idsJSON(shuffled))
			}
			key := e.Key()
			assertPreview(t, mustPreview(t, e.WriteKey("delete_records", key, args)), handlers.DeleteRecordsPreview{
				Matched: 12, WouldAttempt: 12, MoreThanCap: false,
				WouldRefuse: []handlers.RefusalCount{{Code: pipeline.RecordLocked, Count: 3}},
				Sample:      ids(rs[:10]...),
			})
			e.mustReadable(rs...)
			if evs := e.AuditEvents(key); len(evs) != 0 {
				t.Fatalf("audit events after the preview = %d, want 0", len(evs))
			}

			confirmed := strings.Replace(args, "{", `{"confirm":true,`, 1)
			got := mustDeleted(t, e.WriteKey("delete_records", key, confirmed))
			unlocked := slices.Clone(rs)
			unlocked = slices.DeleteFunc(unlocked, func(r *handlers.Record) bool { return r.Locked })
			assertResult(t, got, handlers.DeleteRecordsResult{
				Attempted: 12, Deleted: 9, DeletedIDs: ids(unlocked...), Remaining: 3,
				Refused: []handlers.RefusedGroup{{Code: pipeline.RecordLocked, Count: 3, IDs: ids(rs[1], rs[5], rs[8])}},
			})
			e.mustGone(unlocked...)
			e.mustReadable(rs[1], rs[5], rs[8])
			e.mustOneOKEvent(key, unlocked...)
		})
	}
}

// Ensure confirm is a boolean: "true", 1 and null are refused by the strict
// parse without reading anything, false previews, and none of them deletes
// anything or spends its key.
func TestDeleteRecords_ConfirmIsStrictlyBoolean(t *testing.T) {
	reads := &readCounter{}
	e := MustStartWith(t, reads.wrap, nil)
	p := e.CreateProject("alpha")
	rs := e.mustRecords(p.ID, 3, numbered)
	for _, confirm := range []string{`"true"`, `1`, `null`, `"false"`, `0`} {
		before := reads.count()
		key := e.Key()
		err := MustFail(t, e.WriteKey("delete_records", key, fmt.Sprintf(`{"project_id":%q,"filter":{},"confirm":%s}`, p.ID, confirm)), pipeline.InvalidInput)
		if !strings.HasPrefix(err.Message, "Argument /confirm ") {
			t.Fatalf("confirm %s: message %q does not name /confirm", confirm, err.Message)
		}
		if n := reads.count() - before; n != 0 {
			t.Fatalf("confirm %s: the store was read %d times before the refusal", confirm, n)
		}
		e.MustNoTrace(key)
	}
	key := e.Key()
	assertPreview(t, mustPreview(t, e.WriteKey("delete_records", key, fmt.Sprintf(`{"project_id":%q,"filter":{},"confirm":false}`, p.ID))),
		handlers.DeleteRecordsPreview{Matched: 3, WouldAttempt: 3, WouldRefuse: []handlers.RefusalCount{}, Sample: ids(rs...)})
	e.MustNoTrace(key)
	e.mustReadable(rs...)
}

// Ensure a selection of more records than one call attempts (205) is
// previewed as such, that the first call deletes the first 200 in id order
// and answers remaining 5 with a next hint, and the second the last 5,
// with no hint.
func TestDeleteRecords_MoreThanCapTakesTwoCalls(t *testing.T) {
	e := MustStart(t)
	p := e.CreateProject("alpha")
	rs := e.mustRecords(p.ID, 205, numbered)
	args := fmt.Sprintf(`{"project_id":%q,"filter":{"title_prefix":"r"}}`, p.ID)
	assertPreview(t, mustPreview(t, e.Write("delete_records", args)), handlers.DeleteRecordsPreview{
		Matched: 205, WouldAttempt: 200, MoreThanCap: true, WouldRefuse: []handlers.RefusalCount{}, Sample: ids(rs[:10]...),
	})

	confirmed := strings.Replace(args, "{", `{"confirm":true,`, 1)
	key := e.Key()
	first := e.WriteKey("delete_records", key, confirmed)
	got := mustDeleted(t, first)
	assertResult(t, got, handlers.DeleteRecordsResult{
		Attempted: 200, Deleted: 200, DeletedIDs: ids(rs[:200]...), Remaining: 5, Next: "yes",
	})
	if !strings.Contains(got.Next, "new idempotency key") {
		t.Fatalf("next = %q, want a sentence saying how to continue", got.Next)
	}
	e.mustGone(rs[:200]...)
	e.mustReadable(rs[200:]...)
	e.mustOneOKEvent(key, rs[:200]...)

	second := e.Write("delete_records", confirmed)
	assertResult(t, mustDeleted(t, second), handlers.DeleteRecordsResult{
		Attempted: 5, Deleted: 5, DeletedIDs: ids(rs[200:]...), Remaining: 0,
	})
	if bytes.Contains(second.Output, []byte(`"next"`)) {
		t.Fatalf("the last call's answer has next: %s", second.Output)
	}
	e.mustGone(rs[200:]...)
}

// Ensure records a call refuses still match and come first again, so that
// next then says how to get past them, and that the filter's locked: false
// does.
func TestDeleteRecords_NextSaysHowToGetPastRefusals(t *testing.T) {
	e := MustStart(t)
	p := e.CreateProject("alpha")
	rs := e.mustRecords(p.ID, 202, numbered)
	rs[0] = e.lock(rs[0])
	got := mustDeleted(t, e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"filter":{},"confirm":true}`, p.ID)))
	assertResult(t, got, handlers.DeleteRecordsResult{
		Attempted: 200, Deleted: 199, DeletedIDs: ids(rs[1:200]...), Remaining: 3, Next: "yes",
		Refused: []handlers.RefusedGroup{{Code: pipeline.RecordLocked, Count: 1, IDs: ids(rs[0])}},
	})
	if !strings.Contains(got.Next, `"locked": false`) {
		t.Fatalf("next = %q, want it to say how to leave the refused records out", got.Next)
	}
	got = mustDeleted(t, e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"filter":{"locked":false},"confirm":true}`, p.ID)))
	assertResult(t, got, handlers.DeleteRecordsResult{Attempted: 2, Deleted: 2, DeletedIDs: ids(rs[200:]...)})
	e.mustReadable(rs[0])
}

// Ensure that of 10 selected records of which 3 are locked, 7 are deleted
// and the 3 refused as one RECORD_LOCKED group with their ids, still
// readable; the audit event names each deleted record at the revision it
// had.
func TestDeleteRecords_LockedRecordsRefusedRestDeleted(t *testing.T) {
	e := MustStart(t)
	p := e.CreateProject("alpha")
	rs := e.mustRecords(p.ID, 10, numbered)
	for _, i := range []int{2, 3, 7} {
		rs[i] = e.lock(rs[i])
	}
	rs[0] = e.retitle(rs[0], "changed") // revision 2
	rs[9] = e.retitle(rs[9], "changed")
	key := e.Key()
	got := mustDeleted(t, e.WriteKey("delete_records", key, fmt.Sprintf(`{"project_id":%q,"record_ids":%s,"confirm":true}`, p.ID, idsJSON(ids(rs...)))))
	deleted := []*handlers.Record{rs[0], rs[1], rs[4], rs[5], rs[6], rs[8], rs[9]}
	assertResult(t, got, handlers.DeleteRecordsResult{
		Attempted: 10, Deleted: 7, DeletedIDs: ids(deleted...), Remaining: 3,
		Refused: []handlers.RefusedGroup{{Code: pipeline.RecordLocked, Count: 3, IDs: ids(rs[2], rs[3], rs[7])}},
	})
	e.mustReadable(rs[2], rs[3], rs[7])
	e.mustGone(deleted...)
	e.mustOneOKEvent(key, deleted...)
}

// refusingStore refuses the deletion of chosen records with a code of its
// own, as a rule of the store's would.
type refusingStore struct {
	handlers.Store
	refuse map[string]pipeline.Code
}

func (s refusingStore) DeleteRecord(projectID, id string) error {
	if code, ok := s.refuse[id]; ok {
		return pipeline.Errorf(code, "The store refuses this deletion.")
	}
	return s.Store.DeleteRecord(projectID, id)
}

// Ensure refusals are grouped by code, largest group first, each with its
// ids in id order, and that a refusal the store makes reaches delete_records
// as it reaches delete_record: both go through one code path.
func TestDeleteRecords_RefusalsGroupedLargestFirst(t *testing.T) {
	s := refusingStore{refuse: map[string]pipeline.Code{}}
	e := MustStartWith(t, func(b handlers.Store) handlers.Store { return refusingStore{b, s.refuse} }, nil)
	p := e.CreateProject("alpha")
	rs := e.mustRecords(p.ID, 8, numbered)
	rs[6] = e.lock(rs[6])
	rs[1] = e.lock(rs[1])
	for _, i := range []int{0, 4, 7} {
		s.refuse[rs[i].ID] = pipeline.RevisionConflict
	}
	MustFail(t, e.Write("delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, p.ID, rs[4].ID)), pipeline.RevisionConflict)

	got := mustDeleted(t, e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"filter":{},"confirm":true}`, p.ID)))
	assertResult(t, got, handlers.DeleteRecordsResult{
		Attempted: 8, Deleted: 3, DeletedIDs: ids(rs[2], rs[3], rs[5]), Remaining: 5,
		Refused: []handlers.RefusedGroup{
			{Code: pipeline.RevisionConflict, Count: 3, IDs: ids(rs[0], rs[4], rs[7])},
			{Code: pipeline.RecordLocked, Count: 2, IDs: ids(rs[1], rs[6])},
		},
	})
	e.mustReadable(rs[0], rs[1], rs[4], rs[6], rs[7])
}

// fault makes the store's DeleteRecord fail once, at its failAt-th
// call, with err: a fault in the middle of a walk.
type fault struct {
	failAt int
	err    error

	mu    sync.Mutex
	calls int
}

// wrap is the store of one transaction, with the fault.
func (f *fault) wrap(s handlers.Store) handlers.Store { return faultyStore{s, f} }

type faultyStore struct {
	handlers.Store
	f *fault
}

func (s faultyStore) DeleteRecord(projectID, id string) error {
	s.f.mu.Lock()
	s.f.calls++
	n := s.f.calls
	s.f.mu.Unlock()
	if n == s.f.failAt {
		return s.f.err
	}
	return s.Store.DeleteRecord(projectID, id)
}

// Ensure a fault at the 4th record aborts the whole call: nothing is
// deleted (all 10 still readable); the answer is an error with the fault's
// code and the catalogue's message, and a detail saying that nothing was
// deleted and naming the 4th record as where it stopped. An internal fault
// spends the key (retry new_key): one failed audit event with its code
// names that record, and the same key then answers IDEMPOTENCY_KEY_FAILED,
// confirmed or not. A fault of the store (UNAVAILABLE) spends nothing
// (retry same_key): no event, and the same key then deletes all 10, as a
// new key does after an internal fault. The log names the record by
// position, never by id.
func TestDeleteRecords_FaultDeletesNothing(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fault   error
		code    pipeline.Code
		message string
		retry   pipeline.Retry
	}{
		{"internal", errors.New("injected fault"), pipeline.Internal, pipeline.InternalMessage, pipeline.RetryNewKey},
		{"unavailable", pipeline.Wrap(pipeline.Unavailable, errors.New("injected fault"), "The store is closed."), pipeline.Unavailable,
			"The store is closed.", pipeline.RetrySameKey},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			f := &fault{failAt: 4, err: tt.fault}
			e := MustStartWith(t, f.wrap, slog.New(slog.NewJSONHandler(&logs, nil)))
			p := e.CreateProject("alpha")
			rs := e.mustRecords(p.ID, 10, numbered)
			args := fmt.Sprintf(`{"project_id":%q,"record_ids":%s,"confirm":true}`, p.ID, idsJSON(ids(rs...)))
			key := e.Key()
			res := e.WriteKey("delete_records", key, args)
			MustFail(t, res, tt.code)
			w := mustWire(t, res)
			if w.Error.Message != tt.message || w.Error.Retry != tt.retry || w.Error.Preview != nil {
				t.Fatalf("envelope = %s", res.ErrorJSON())
			}
			if want := fmt.Sprintf(`{"deleted":0,"stopped_at":%q}`, rs[3].ID); string(w.Error.Detail) != want {
				t.Fatalf("detail = %s, want %s", w.Error.Detail, want)
			}
			e.mustReadable(rs...)
			if !strings.Contains(logs.String(), "record 4 of 10") || strings.Contains(logs.String(), rs[3].ID) {
				t.Fatalf("log = %s, want the position of the record and not its id", logs.String())
			}

			retryKey := key
			if tt.retry == pipeline.RetrySameKey {
				if n := len(e.AuditEvents(key)); n != 0 {
					t.Fatalf("audit events for the key = %d, want none", n)
				}
			} else {
				e.MustOneFailure(key, tt.code, auditlog.Target{Kind: "record", ID: rs[3].ID, Revision: 1})
				if targets := e.AuditEvents(key)[0].Targets; len(targets) != 1 {
					t.Fatalf("the failed event names %+v, want only the record it stopped at", targets)
				}
				for _, again := range []string{args, strings.Replace(args, `,"confirm":true`, "", 1)} {
					err := MustFail(t, e.WriteKey("delete_records", key, again), pipeline.KeyFailed)
					if !strings.Contains(err.Message, string(tt.code)) {
						t.Fatalf("message %q does not name %s", err.Message, tt.code)
					}
				}
				if n := len(e.AuditEvents(key)); n != 1 {
					t.Fatalf("audit events for the key = %d, want 1", n)
				}
				e.mustReadable(rs...)
				retryKey = e.Key()
			}

			assertResult(t, mustDeleted(t, e.WriteKey("delete_records", retryKey, args)), handlers.DeleteRecordsResult{
				Attempted: 10, Deleted: 10, DeletedIDs: ids(rs...),
			})
			e.mustGone(rs...)
			e.mustOneOKEvent(retryKey, rs...)
		})
	}
}

// Ensure a retry of a confirmed call with the same key, confirmed or not,
// replays the first answer byte for byte and deletes nothing more, even
// though the records changed since: a record unlocked, others created.
func TestDeleteRecords_ReplayIsByteIdentical(t *testing.T) {
	e := MustStart(t)
	p := e.CreateProject("alpha")
	rs := e.mustRecords(p.ID, 6, numbered)
	rs[2] = e.lock(rs[2])
	args := fmt.Sprintf(`{"project_id":%q,"filter":{},"confirm":true}`, p.ID)
	key := e.Key()
	first := e.WriteKey("delete_records", key, args)
	mustDeleted(t, first)

	rs[2] = MustOK[handlers.RecordResult](t, e.Write("update_record",
		fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":2,"locked":false}`, p.ID, rs[2].ID))).Record
	later := e.mustRecords(p.ID, 3, numbered)
	for _, again := range []string{args, fmt.Sprintf(`{"filter":{},"project_id":%q}`, p.ID)} {
		res := e.WriteKey("delete_records", key, again)
		if res.Err != nil || !res.Replayed || !bytes.Equal(res.Output, first.Output) || res.AuditID != first.AuditID {
			t.Fatalf("retry = %+v (%s), want the replay of %s", res, res.Output, first.Output)
		}
	}
	e.mustReadable(rs[2])
	e.mustReadable(later...)
	if n := len(e.AuditEvents(key)); n != 1 {
		t.Fatalf("audit events for the key = %d, want 1", n)
	}
}

// Ensure ids of another project's records, like ids that name nothing,
// are reported as not found, indistinguishably, and are not deleted.
func TestDeleteRecords_OtherProjectsIdsNotFound(t *testing.T) {
	e := MustStart(t)
	a, b := e.CreateProject("alpha"), e.CreateProject("beta")
	ours := e.mustRecords(a.ID, 3, numbered)
	theirs := e.mustRecords(b.ID, 2, numbered)
	all := append(ids(ours...), ids(theirs...)...)
	all = append(all, missing)
	args := fmt.Sprintf(`{"project_id":%q,"record_ids":%s}`, a.ID, idsJSON(all))
	slices.Sort(all)
	assertPreview(t, mustPreview(t, e.Write("delete_records", args)), handlers.DeleteRecordsPreview{
		Matched: 3, WouldAttempt: 6, WouldRefuse: []handlers.RefusalCount{{Code: pipeline.NotFound, Count: 3}}, Sample: all,
	})
	notFound := append(ids(theirs...), missing)
	slices.Sort(notFound)
	key := e.Key()
	assertResult(t, mustDeleted(t, e.WriteKey("delete_records", key, strings.Replace(args, "{", `{"confirm":true,`, 1))), handlers.DeleteRecordsResult{
		Attempted: 6, Deleted: 3, DeletedIDs: ids(ours...), NotFound: notFound,
	})
	e.mustGone(ours...)
	e.mustReadable(theirs...)
	e.mustOneOKEvent(key, ours...)
}

// Ensure a missing project is refused as delete_record refuses it: the
// preview answers NOT_FOUND without a trace, the confirmed call answers
// NOT_FOUND with one failed event naming the project sought.
func TestDeleteRecords_ProjectMissing(t *testing.T) {
	e := MustStart(t)
	for _, sel := range []string{`"filter":{}`, `"record_ids":["` + missing + `"]`} {
		key := e.Key()
		args := fmt.Sprintf(`{"project_id":%q,%s}`, missing, sel)
		if err := MustFail(t, e.WriteKey("delete_records", key, args), pipeline.NotFound); err.Preview != nil {
			t.Fatal("the refusal carries a preview")
		}
		e.MustNoTrace(key)
		key = e.Key()
		MustFail(t, e.WriteKey("delete_records", key, strings.Replace(args, "{", `{"confirm":true,`, 1)), pipeline.NotFound)
		e.MustOneFailure(key, pipeline.NotFound, auditlog.Target{Kind: "project", ID: missing})
	}
}

// readCounter counts the tools' reads of the store, in every transaction.
type readCounter struct {
	mu    sync.Mutex
	reads int
}

func (c *readCounter) read() {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
}

func (c *readCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// wrap is the store of one transaction, counted.
func (c *readCounter) wrap(s handlers.Store) handlers.Store { return countingStore{s, c} }

type countingStore struct {
	handlers.Store
	c *readCounter
}

func (s countingStore) Project(id string) (*handlers.Project, error) {
	s.c.read()
	return s.Store.Project(id)
}

func (s countingStore) Record(projectID, id string) (*handlers.Record, error) {
	s.c.read()
	return s.Store.Record(projectID, id)
}

func (s countingStore) Records(projectID, after string, limit int) ([]*handlers.Record, bool, error) {
	s.c.read()
	return s.Store.Records(projectID, after, limit)
}

// fakeIDs returns n distinct well-formed ids that name nothing.
func fakeIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("7%025d", i)
	}
	return out
}

// Ensure the selection is exactly one of record_ids (1 to 200 distinct
// ids) and filter, as the schema advertises (oneOf, not), and that every
// other selection is refused by the strict parse before anything is read,
// with no trace; 200 ids are accepted, 201 refused as over the schema's
// size bound, as every array over its maxItems is.
func TestDeleteRecords_SelectionIsExactlyOneForm(t *testing.T) {
	reads := &readCounter{}
	e := MustStartWith(t, reads.wrap, nil)
	p := e.CreateProject("alpha")
	r := e.CreateRecord(p.ID, "kept")
	for _, tt := range []struct {
		name, sel string
		code      pipeline.Code
		message   string
	}{
		{"both", `"record_ids":["` + r.ID + `"],"filter":{}`, pipeline.InvalidInput, "The arguments object matches none of the forms the schema allows (oneOf)."},
		{"neither", ``, pipeline.InvalidInput, "The arguments object matches none of the forms the schema allows (oneOf)."},
		{"no ids", `"record_ids":[]`, pipeline.InvalidInput, "Argument /record_ids must have at least 1 items (minItems)."},
		{"repeated id", `"record_ids":["` + r.ID + `","` + r.ID + `"]`, pipeline.InvalidInput, "Argument /record_ids must not repeat an item (uniqueItems)."},
		{"malformed id", `"record_ids":["not-an-id"]`, pipeline.InvalidInput, "Argument /record_ids/0 must match the pattern ^[0-9A-HJKMNP-TV-Z]{26}$ (pattern)."},
		{"201 ids", `"record_ids":` + idsJSON(fakeIDs(201)), pipeline.InputTooLarge, "Argument /record_ids must have at most 200 items (maxItems)."},
		{"null ids", `"record_ids":null`, pipeline.InvalidInput, ""},
		{"null filter", `"filter":null`, pipeline.InvalidInput, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, confirm := range []string{``, `"confirm":true,`} {
				before := reads.count()
				key := e.Key()
				args := fmt.Sprintf(`{%s"project_id":%q`, confirm, p.ID)
				if tt.sel != "" {
					args += "," + tt.sel
				}
				err := MustFail(t, e.WriteKey("delete_records", key, args+"}"), tt.code)
				if tt.message != "" && err.Message != tt.message {
					t.Fatalf("message = %q, want %q", err.Message, tt.message)
				}
				if n := reads.count() - before; n != 0 {
					t.Fatalf("the store was read %d times before the refusal", n)
				}
				e.MustNoTrace(key)
			}
		})
	}
	e.mustReadable(r)

	edge := fakeIDs(200)
	assertPreview(t, mustPreview(t, e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"record_ids":%s}`, p.ID, idsJSON(edge)))),
		handlers.DeleteRecordsPreview{WouldAttempt: 200, WouldRefuse: []handlers.RefusalCount{{Code: pipeline.NotFound, Count: 200}}, Sample: edge[:10]})
	assertResult(t, mustDeleted(t, e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"record_ids":%s,"confirm":true}`, p.ID, idsJSON(edge)))),
		handlers.DeleteRecordsResult{Attempted: 200, NotFound: edge})
}

// Ensure each condition of the filter selects what docs/PROTOCOL.md says, alone
// and together: fields by equal value of the same type, title_prefix
// exactly, created_after and created_before strictly and in any offset,
// locked either way; and that the confirmed call deletes what the preview
// selected.
func TestDeleteRecords_FilterSelects(t *testing.T) {
	e := MustStartRealClock(t) // records created at times that differ, in id order
	p := e.CreateProject("alpha")
	create := func(title, fields string) *handlers.Record {
		return MustOK[handlers.RecordResult](t, e.Write("create_record",
			fmt.Sprintf(`{"project_id":%q,"title":%q,"fields":%s}`, p.ID, title, fields))).Record
	}
	r := []*handlers.Record{
		create("alpha one", `{"owner":"sam","points":3,"done":false}`),
		create("alpha two", `{"owner":"kim","points":3,"done":true}`),
		create("beta", `{"owner":"sam","points":"3"}`),
		create("Alpha caps", `{}`),
		create("alphabet", `{"owner":"sam","done":false}`),
	}
	r[3] = e.lock(r[3])
	at := func(i int) string { return r[i].CreatedAt.Format(time.RFC3339Nano) }
	inTokyo := func(i int) string { return r[i].CreatedAt.In(time.FixedZone("", 9*3600)).Format(time.RFC3339Nano) }
	for _, tt := range []struct {
		filter string
		want   []int
	}{
		{`{}`, []int{0, 1, 2, 3, 4}},
		{`{"title_prefix":"alpha"}`, []int{0, 1, 4}},
		{`{"title_prefix":"alpha one and more"}`, nil},
		{`{"fields":{}}`, []int{0, 1, 2, 3, 4}},
		{`{"fields":{"owner":"sam"}}`, []int{0, 2, 4}},
		{`{"fields":{"owner":"Sam"}}`, nil},
		{`{"fields":{"points":3}}`, []int{0, 1}},
		{`{"fields":{"points":3.0}}`, []int{0, 1}},
		{`{"fields":{"points":"3"}}`, []int{2}},
		{`{"fields":{"done":false}}`, []int{0, 4}},
		{`{"fields":{"owner":"sam","done":false}}`, []int{0, 4}},
		{`{"fields":{"missing":1}}`, nil},
		{`{"locked":true}`, []int{3}},
		{`{"locked":false}`, []int{0, 1, 2, 4}},
		{`{"created_after":"` + at(2) + `"}`, []int{3, 4}},
		{`{"created_before":"` + at(2) + `"}`, []int{0, 1}},
		{`{"created_after":"` + inTokyo(2) + `"}`, []int{3, 4}},
		{`{"created_after":"` + at(0) + `","created_before":"` + at(4) + `"}`, []int{1, 2, 3}},
		{`{"created_after":"` + at(4) + `","created_before":"` + at(0) + `"}`, nil},
		{`{"title_prefix":"alpha","fields":{"owner":"sam"},"locked":false}`, []int{0, 4}},
	} {
		var want []*handlers.Record
		for _, i := range tt.want {
			want = append(want, r[i])
		}
		wantRefuse := []handlers.RefusalCount{}
		if slices.Contains(tt.want, 3) {
			wantRefuse = append(wantRefuse, handlers.RefusalCount{Code: pipeline.RecordLocked, Count: 1})
		}
		res := e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"filter":%s}`, p.ID, tt.filter))
		got := mustPreview(t, res)
		if got.Matched != len(want) || !slices.Equal(got.Sample, ids(want...)) || !slices.Equal(got.WouldRefuse, wantRefuse) {
			t.Errorf("filter %s selects %v (%+v), want %v", tt.filter, got.Sample, got, ids(want...))
		}
	}
	e.mustReadable(r...)
	got := mustDeleted(t, e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"filter":{"fields":{"owner":"sam"}},"confirm":true}`, p.ID)))
	assertResult(t, got, handlers.DeleteRecordsResult{Attempted: 3, Deleted: 3, DeletedIDs: ids(r[0], r[2], r[4])})
	e.mustGone(r[0], r[2], r[4])
	e.mustReadable(r[1], r[3])
}

// Ensure every bound of the filter at its edge: the edge accepted, one
// past it refused by the strict parse before anything is read; and the
// rules a schema cannot state (a title's characters, a real date, NUL)
// refused the same way, naming the argument under /filter.
func TestDeleteRecords_FilterLimits(t *testing.T) {
	reads := &readCounter{}
	e := MustStartWith(t, reads.wrap, nil)
	p := e.CreateProject("alpha")
	fields := func(n int) string {
		m := map[string]int{}
		for i := range n {
			m[fmt.Sprintf("f%d", i)] = i
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tt := range []struct {
		filter  string
		code    pipeline.Code // "" if accepted
		message string
	}{
		{`{"fields":` + fields(8) + `}`, "", ""},
		{`{"fields":` + fields(9) + `}`, pipeline.InputTooLarge, "Argument /filter/fields must have at most 8 members (maxProperties)."},
		{`{"fields":{"a":{"b":1}}}`, pipeline.InvalidInput, ""},
		{`{"fields":{"a":null}}`, pipeline.InvalidInput, ""},
		{`{"fields":{"a":"x\u0000"}}`, pipeline.InvalidInput, "Argument /filter/fields has a string value that holds the character NUL, U+0000 (nul)."},
		{`{"title_prefix":"` + strings.Repeat("é", 200) + `"}`, "", ""},
		{`{"title_prefix":"` + strings.Repeat("é", 201) + `"}`, pipeline.InputTooLarge, "Argument /filter/title_prefix must be at most 200 characters long (maxLength)."},
		{`{"title_prefix":""}`, pipeline.InvalidInput, "Argument /filter/title_prefix must be at least 1 characters long (minLength)."},
		{`{"title_prefix":"a\nb"}`, pipeline.InvalidInput, "Argument /filter/title_prefix must not hold control or format characters (Unicode Cc, Cf), such as line breaks, bidi overrides and zero-width marks (control)."},
		{`{"created_after":"2026-01-02T15:04:05.123456789+07:00"}`, "", ""},
		{`{"created_after":"2026-01-02T15:04:05.1234567891+07:00"}`, pipeline.InputTooLarge, "Argument /filter/created_after must be at most 35 characters long (maxLength)."},
		{`{"created_before":"2026-01-02"}`, pipeline.InvalidInput, ""},
		{`{"created_before":"2026-13-02T15:04:05Z"}`, pipeline.InvalidInput, "Argument /filter/created_before must be a valid date and time in RFC 3339 form, such as 2026-01-02T15:04:05Z (date-time)."},
		{`{"created_after":"2026-02-30T15:04:05Z"}`, pipeline.InvalidInput, "Argument /filter/created_after must be a valid date and time in RFC 3339 form, such as 2026-01-02T15:04:05Z (date-time)."},
		{`{"locked":"true"}`, pipeline.InvalidInput, "Argument /filter/locked must be of type boolean (type)."},
		{`{"Locked":true}`, pipeline.InvalidInput, ""},
		{`{"owner":"sam"}`, pipeline.InvalidInput, "Argument /filter has a member the tool does not define (additionalProperties)."},
	} {
		before := reads.count()
		key := e.Key()
		res := e.WriteKey("delete_records", key, fmt.Sprintf(`{"project_id":%q,"filter":%s}`, p.ID, tt.filter))
		if tt.code == "" {
			mustPreview(t, res)
			continue
		}
		err := MustFail(t, res, tt.code)
		if tt.message != "" && err.Message != tt.message {
			t.Errorf("filter %s: message %q, want %q", tt.filter, err.Message, tt.message)
		}
		if n := reads.count() - before; n != 0 {
			t.Errorf("filter %s: the store was read %d times before the refusal", tt.filter, n)
		}
		e.MustNoTrace(key)
	}
}

// detailedStore answers every project lookup with err.
type detailedStore struct {
	handlers.Store
	err error
}

func (s detailedStore) Project(string) (*handlers.Project, error) { return nil, s.err }

// Ensure the envelope's detail reaches the wire only on a fault
// delete_records reports, never on a refusal, even one that carries a
// detail, and that a fault met before the walk reaches a record says that
// nothing was deleted without naming a record.
func TestDeleteRecords_DetailOnlyOnFaults(t *testing.T) {
	refusal := pipeline.Errorf(pipeline.NotFound, "No such project.")
	refusal.Detail = map[string]string{"secret": "detail"}
	for _, tt := range []struct {
		name   string
		err    error
		code   pipeline.Code
		detail string
	}{
		{"refusal", refusal, pipeline.NotFound, ""},
		{"fault before the walk", errors.New("injected"), pipeline.Internal, `{"deleted":0}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := MustStartWith(t, func(b handlers.Store) handlers.Store { return detailedStore{b, tt.err} }, nil)
			res := e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"filter":{},"confirm":true}`, missing))
			MustFail(t, res, tt.code)
			if got := string(mustWire(t, res).Error.Detail); got != tt.detail {
				t.Fatalf("detail = %s, want %q", got, tt.detail)
			}
		})
	}
}

// BenchmarkDeleteRecords deletes 200 records with one delete_records call
// and with 200 delete_record calls, in one run, each on a fresh store of
// the tests' backend, a real file with every commit fsynced. An op is 200 records deleted in both, so the
// ratio of their ns/op is what one commit instead of 200 saves; the run
// logs it. The records are made before each op, outside the timer, in one
// transaction of the store's.
func BenchmarkDeleteRecords(b *testing.B) {
	const n = 200
	perOp := map[string]time.Duration{}
	for _, how := range []string{"delete_records", "delete_record"} {
		b.Run(how, func(b *testing.B) {
			e := MustStart(b)
			p := e.CreateProject("bench")
			for range b.N {
				b.StopTimer()
				rs := e.seed(p.ID, n)
				b.StartTimer()
				if how == "delete_records" {
					out := mustDeleted(b, e.Write("delete_records", fmt.Sprintf(`{"project_id":%q,"record_ids":%s,"confirm":true}`, p.ID, idsJSON(rs))))
					if out.Deleted != n {
						b.Fatalf("deleted %d, want %d", out.Deleted, n)
					}
					continue
				}
				for _, id := range rs {
					MustOK[handlers.DeletedResult](b, e.Write("delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, p.ID, id)))
				}
			}
			perOp[how] = b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
	if perOp["delete_records"] > 0 {
		b.Logf("200 records: one delete_records call %v, 200 delete_record calls %v: %.1f× faster",
			perOp["delete_records"], perOp["delete_record"], float64(perOp["delete_record"])/float64(perOp["delete_records"]))
	}
}

// seed creates n records in the project in one transaction, straight
// through the store, and returns their ids: a benchmark's set-up, which
// needs no audit event as long as the records are deleted before the
// store is checked.
func (e *env) seed(projectID string, n int) []string {
	e.t.Helper()
	var out []string
	e.st.Update(func(tx pipeline.Tx[handlers.Store]) error {
		now := e.st.Now()
		op := &pipeline.Op[handlers.Store]{Now: now}
		for range n {
			r := &handlers.Record{ID: op.NewID(), ProjectID: projectID, Title: "bench", Fields: handlers.Fields{}, Revision: 1, CreatedAt: now, UpdatedAt: now}
			if err := tx.Domain().PutRecord(r); err != nil {
				return err
			}
			out = append(out, r.ID)
		}
		return nil
	})
	slices.Sort(out)
	return out
}
