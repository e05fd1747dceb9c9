package handlers

import (
	"context"

	"github.com/writerd/writerd/pipeline"
)

// record loads a record; if it cannot, the id sought is named as the
// refusal's target.
func (h *handler) record(op *pipeline.Op[Store], ref RecordRef) (*Record, error) {
	r, err := op.Store.Record(ref.ProjectID, ref.RecordID)
	if err != nil {
		op.Touch(kindRecord, ref.RecordID, 0)
		return nil, err
	}
	return r, nil
}

func (h *handler) createRecord(_ context.Context, op *pipeline.Op[Store], in *CreateRecordInput) (*RecordResult, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	now := op.Now.UTC()
	r := &Record{
		ID:        op.NewID(),
		ProjectID: p.ID,
		Title:     in.Title,
		Body:      in.Body,
		Fields:    orEmptyFields(in.Fields),
		Revision:  1,
		CreatedAt: now,
		UpdatedAt: now,
	}
	if err := op.Store.PutRecord(r); err != nil {
		return nil, err
	}
	touch(op, r)
	return &RecordResult{Record: r}, nil
}

func (h *handler) updateRecord(_ context.Context, op *pipeline.Op[Store], in *UpdateRecordInput) (*RecordResult, error) {
	r, err := h.record(op, in.RecordRef)
	if err != nil {
		return nil, err
	}
	if err := checkRevision(op, r, &in.ExpectedRevision); err != nil {
		return nil, err
	}
	unlocks := in.Locked != nil && !*in.Locked
	if r.Locked && !unlocks {
		return nil, refuse(op, r, recordLocked())
	}
	if in.Title != nil {
		r.Title = *in.Title
	}
	if in.Body != nil {
		r.Body = *in.Body
	}
	if in.Fields != nil {
		r.Fields = orEmptyFields(*in.Fields)
	}
	if in.Locked != nil {
		r.Locked = *in.Locked
	}
	r.Revision++
	r.UpdatedAt = op.Now.UTC()
	if err := op.Store.PutRecord(r); err != nil {
		return nil, err
	}
	touch(op, r)
	return &RecordResult{Record: r}, nil
}

func (h *handler) deleteRecord(_ context.Context, op *pipeline.Op[Store], in *DeleteRecordInput) (*DeletedResult, error) {
	r, err := h.removeRecord(op.Store, in.RecordRef, in.ExpectedRevision)
	if err != nil {
		return nil, refuseRecord(op, in.RecordID, r, err)
	}
	touch(op, r)
	return &DeletedResult{Deleted: Deleted{ID: r.ID, Revision: r.Revision}}, nil
}

// previewRecord shows the record an unconfirmed delete_record would
// delete, or answers the refusal the confirmed call would meet.
func (h *handler) previewRecord(_ context.Context, op *pipeline.Op[Store], in *DeleteRecordInput) (any, error) {
	r, err := h.deletableRecord(op.Store, in.RecordRef, in.ExpectedRevision)
	if err != nil {
		return nil, refuseRecord(op, in.RecordID, r, err)
	}
	return &RecordResult{Record: r}, nil
}

// removeRecord is the one code path of a record's deletion, for
// delete_record and each record of delete_records: it deletes the record
// ref names if deletableRecord lets it. It returns the record whenever it
// could load it, a refused one too.
func (h *handler) removeRecord(s Store, ref RecordRef, expected *int64) (*Record, error) {
	r, err := h.deletableRecord(s, ref, expected)
	if err != nil {
		return r, err
	}
	if err := s.DeleteRecord(r.ProjectID, r.ID); err != nil {
		return r, err
	}
	return r, nil
}

// deletableRecord loads the record ref names and refuses it as its
// deletion would be refused: NOT_FOUND, REVISION_CONFLICT (if expected is
// given) or RECORD_LOCKED. The confirmed calls and their previews all go
// through it, so that a preview never invites a confirmation that would
// fail. It returns the record whenever it could load it, a refused one
// too, and names nothing in the audit event: its callers do.
func (h *handler) deletableRecord(s Store, ref RecordRef, expected *int64) (*Record, error) {
	r, err := s.Record(ref.ProjectID, ref.RecordID)
	if err != nil {
		return nil, err
	}
	if err := staleRevision(r, expected); err != nil {
		return r, err
	}
	if r.Locked {
		return r, recordLocked()
	}
	return r, nil
}

// refuseRecord names the record a failed deletion is about in the audit
// event, as loaded, or by the id sought at revision 0 if it could not be
// loaded, and returns err.
func refuseRecord(op *pipeline.Op[Store], id string, r *Record, err error) error {
	if r != nil {
		return refuse(op, r, err)
	}
	op.Touch(kindRecord, id, 0)
	return err
}

func (h *handler) listRecords(_ context.Context, op *pipeline.Op[Store], in *ListRecordsInput) (*RecordList, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	page, more, err := op.Store.Records(p.ID, in.Cursor, in.limit())
	if err != nil {
		return nil, err
	}
	return &RecordList{Records: orEmpty(page), NextCursor: nextCursor(page, more)}, nil
}

func (h *handler) getRecord(_ context.Context, op *pipeline.Op[Store], in *GetRecordInput) (*RecordResult, error) {
	r, err := h.record(op, in.RecordRef)
	if err != nil {
		return nil, err
	}
	return &RecordResult{Record: r}, nil
}
