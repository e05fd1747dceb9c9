package handlers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// delete_records deletes up to maxBatch records of one project in one call:
// one transaction, one idempotency record, one audit event. Each record goes
// through removeRecord, the code path of delete_record, so that every rule
// that refuses a single deletion refuses here too; a refusal is per record,
// and the walk goes on. A fault (any error that is not a refusal) stops the
// walk and is returned, and the pipeline rolls the whole call back: nothing
// is deleted. The preview walks the same selection through deletableRecord,
// the check removeRecord runs before it deletes.

// scanPage is how many records a filter reads from the store at a time.
const scanPage = 256

func (h *handler) deleteRecords(_ context.Context, op *pipeline.Op[Store], in *DeleteRecordsInput) (*DeleteRecordsResult, error) {
	w, err := h.walk(op, in, h.removeRecord)
	if err != nil {
		return nil, w.abort(op, err)
	}
	for _, r := range w.passed {
		touch(op, r) // at the revision it had when it was deleted
	}
	return w.result(), nil
}

// previewRecords answers an unconfirmed delete_records with what the
// confirmed call would do now, or with the refusal it would meet (the
// project does not exist).
func (h *handler) previewRecords(_ context.Context, op *pipeline.Op[Store], in *DeleteRecordsInput) (any, error) {
	w, err := h.walk(op, in, h.deletableRecord)
	if err != nil {
		return nil, err
	}
	return w.preview(), nil
}

// batch is one walk of delete_records: the selection, and what each
// attempt met.
type batch struct {
	matched  int       // records of the project the selection names
	ids      []string  // the ids to attempt, in id order; at most maxBatch
	passed   []*Record // not refused: deleted, or deletable in a preview
	notFound []string
	refused  map[pipeline.Code][]string
	// at is the index in ids of the attempt under way, and atRecord its
	// record once loaded; at is -1 outside the walk.
	at       int
	atRecord *Record
}

// walk selects the records in and sends each through step, in id order:
// removeRecord for the confirmed call, deletableRecord for the preview. It
// stops at the first error that is not a refusal of one record, and
// returns it with the batch as it was then.
func (h *handler) walk(op *pipeline.Op[Store], in *DeleteRecordsInput, step func(Store, RecordRef, *int64) (*Record, error)) (*batch, error) {
	w := &batch{refused: make(map[pipeline.Code][]string), at: -1}
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return w, err
	}
	if in.Filter != nil {
		if err := h.selectRecords(op.Store, p.ID, in.Filter, w); err != nil {
			return w, err
		}
	} else {
		w.ids = slices.Sorted(slices.Values(in.RecordIDs)) // distinct: the schema's uniqueItems
	}
	for i, id := range w.ids {
		w.at, w.atRecord = i, nil
		r, err := step(op.Store, RecordRef{ProjectRef: ProjectRef{ProjectID: p.ID}, RecordID: id}, nil)
		w.atRecord = r
		switch code := pipeline.ErrorCode(err); {
		case err == nil:
			w.passed = append(w.passed, r)
		case code == pipeline.NotFound:
			w.notFound = append(w.notFound, id)
		case isRefusal(code):
			w.refused[code] = append(w.refused[code], id)
		default:
			return w, err
		}
	}
	w.at, w.atRecord = -1, nil
	if in.Filter == nil {
		w.matched = len(w.ids) - len(w.notFound)
	}
	return w, nil
}

// selectRecords reads every record of the project, in id order, counts
// those the filter matches and keeps the first maxBatch of them to
// attempt. Counting them all is what lets the answer say how many remain.
func (h *handler) selectRecords(s Store, projectID string, f *RecordFilter, w *batch) error {
	after, before, err := f.window()
	if err != nil {
		return fmt.Errorf("delete_records: a filter time the strict parse let through: %w", err)
	}
	cursor := ""
	for {
		page, more, err := s.Records(projectID, cursor, scanPage)
		if err != nil {
			return err
		}
		for _, r := range page {
			if f.matches(r, after, before) {
				w.matched++
				if len(w.ids) < maxBatch {
					w.ids = append(w.ids, r.ID)
				}
			}
		}
		if !more || len(page) == 0 {
			return nil
		}
		cursor = page[len(page)-1].ID
	}
}

// isRefusal reports whether code is one of the domain codes with which a
// handler refuses: the refusals of a single record's deletion, which
// delete_records reports per record. Any other error is a fault.
func isRefusal(code pipeline.Code) bool {
	switch code {
	case pipeline.NotFound, pipeline.RevisionConflict, pipeline.AlreadyExists, pipeline.RecordLocked, pipeline.ProjectNotEmpty:
		return true
	}
	return false
}

// abort turns the error that stopped a confirmed walk into the call's
// answer. A refusal of the whole call (no such project) is returned as it
// is. Anything else is a fault, and the pipeline rolls the call back: the
// answer is INTERNAL (or UNAVAILABLE) with the catalogue's fixed message,
// and a detail that says nothing was deleted and at which record the walk
// stopped. For INTERNAL the failed call's audit event names that record;
// an UNAVAILABLE records no event (the pipeline leaves the key unused, so
// the same call with the same key is the retry), and the detail alone
// names it. The private cause gives the record's position, not its id,
// which the caller may have sent.
func (w *batch) abort(op *pipeline.Op[Store], err error) error {
	if isRefusal(pipeline.ErrorCode(err)) {
		return err
	}
	code, message := pipeline.Internal, pipeline.InternalMessage
	if e := pipeline.Public(err); e.Code == pipeline.Unavailable {
		code, message = pipeline.Unavailable, e.Message
	}
	detail := &DeleteRecordsAborted{}
	cause := fmt.Errorf("delete_records: stopped before the walk, rolled back: %w", err)
	if w.at >= 0 {
		id := w.ids[w.at]
		detail.StoppedAt = id
		cause = fmt.Errorf("delete_records: stopped at record %d of %d, rolled back: %w", w.at+1, len(w.ids), err)
		refuseRecord(op, id, w.atRecord, nil)
	}
	e := pipeline.Wrap(code, cause, message)
	e.Detail = detail
	return e
}

// result is the answer of a confirmed walk that finished.
func (w *batch) result() *DeleteRecordsResult {
	res := &DeleteRecordsResult{
		Attempted:  len(w.ids),
		Deleted:    len(w.passed),
		DeletedIDs: make([]string, 0, len(w.passed)),
		Refused:    make([]RefusedGroup, 0, len(w.refused)),
		NotFound:   orEmpty(w.notFound),
		Remaining:  w.matched - len(w.passed),
	}
	for _, r := range w.passed {
		res.DeletedIDs = append(res.DeletedIDs, r.ID)
	}
	for code, ids := range w.refused {
		res.Refused = append(res.Refused, RefusedGroup{Code: code, Count: len(ids), IDs: ids})
	}
	slices.SortFunc(res.Refused, func(a, b RefusedGroup) int { return largestFirst(a.Code, a.Count, b.Code, b.Count) })
	if w.matched > len(w.ids) {
		res.Next = "More records match the selection than one call attempts; send the same call again with a new idempotency key to delete the next ones."
		if len(w.refused) > 0 {
			res.Next = "More records match the selection than one call attempts, and the records this call refused still match and come first again; " +
				`unlock them or narrow the filter ("locked": false leaves locked records out), then send the call again with a new idempotency key.`
		}
	}
	return res
}

// preview is what the confirmed call would do, as the walk found it.
// Ids that name no record of the project count as NOT_FOUND among the
// refusals; the confirmed answer lists them in not_found.
func (w *batch) preview() *DeleteRecordsPreview {
	p := &DeleteRecordsPreview{
		Matched:      w.matched,
		WouldAttempt: len(w.ids),
		WouldRefuse:  make([]RefusalCount, 0, len(w.refused)+1),
		MoreThanCap:  w.matched > len(w.ids),
		Sample:       slices.Clone(w.ids[:min(len(w.ids), previewSample)]),
	}
	if p.Sample == nil {
		p.Sample = []string{}
	}
	if len(w.notFound) > 0 {
		p.WouldRefuse = append(p.WouldRefuse, RefusalCount{Code: pipeline.NotFound, Count: len(w.notFound)})
	}
	for code, ids := range w.refused {
		p.WouldRefuse = append(p.WouldRefuse, RefusalCount{Code: code, Count: len(ids)})
	}
	slices.SortFunc(p.WouldRefuse, func(a, b RefusalCount) int { return largestFirst(a.Code, a.Count, b.Code, b.Count) })
	return p
}

// largestFirst orders refusal groups by count, largest first, then by code.
func largestFirst(aCode pipeline.Code, aCount int, bCode pipeline.Code, bCount int) int {
	return cmp.Or(cmp.Compare(bCount, aCount), strings.Compare(string(aCode), string(bCode)))
}

// window returns the filter's bounds of creation time, zero where absent.
func (f *RecordFilter) window() (after, before time.Time, err error) {
	if after, err = parseTimestamp("/filter/created_after", f.CreatedAfter); err != nil {
		return
	}
	before, err = parseTimestamp("/filter/created_before", f.CreatedBefore)
	return
}

func parseTimestamp(at string, ts Timestamp) (time.Time, error) {
	if ts == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return time.Time{}, pipeline.Invalid("date_time", "Argument %s must be a valid date and time in RFC 3339 form, such as 2026-01-02T15:04:05Z (date-time).", at)
	}
	return t, nil
}

// matches reports whether r meets every condition of the filter; after and
// before are its window.
func (f *RecordFilter) matches(r *Record, after, before time.Time) bool {
	switch {
	case f.Locked != nil && r.Locked != *f.Locked,
		!strings.HasPrefix(r.Title, f.TitlePrefix),
		f.CreatedAfter != "" && !r.CreatedAt.After(after),
		f.CreatedBefore != "" && !r.CreatedAt.Before(before):
		return false
	}
	for name, want := range f.Fields {
		if got, ok := r.Fields[name]; !ok || !sameScalar(got, want) {
			return false
		}
	}
	return true
}

// sameScalar reports whether two field values are equal and of the same
// JSON type. Numbers decode as float64 on both sides.
func sameScalar(a, b any) bool {
	switch a := a.(type) {
	case string:
		b, ok := b.(string)
		return ok && a == b
	case float64:
		b, ok := b.(float64)
		return ok && a == b
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	}
	return false
}

// Validate checks the filter's text and times; the schema has checked
// their forms. A call without a filter has nothing to check: record_ids
// are ids, pinned by their pattern.
func (in *DeleteRecordsInput) Validate() error {
	f := in.Filter
	if f == nil {
		return nil
	}
	_, _, err := f.window()
	return firstError(
		checkLine("/filter/title_prefix", f.TitlePrefix),
		checkFields("/filter/fields", Fields(f.Fields)),
		err,
	)
}
