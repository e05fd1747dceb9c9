package handlers

import (
	"context"

	"github.com/writerd/writerd/pipeline"
)

// record loads a record; if it cannot, the id sought is named as the
// refusal's target.
func (h *handler) record(op *pipeline.Op, ref RecordRef) (*Record, error) {
	r, err := h.s.Record(op.Tx, ref.ProjectID, ref.RecordID)
	if err != nil {
		op.Touch(kindRecord, ref.RecordID, 0)
		return nil, err
	}
	return r, nil
}

func (h *handler) createRecord(_ context.Context, op *pipeline.Op, in *CreateRecordInput) (*RecordResult, error) {
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
	if err := h.s.PutRecord(op.Tx, r); err != nil {
		return nil, err
	}
	touch(op, r)
	return &RecordResult{Record: r}, nil
}

func (h *handler) updateRecord(_ context.Context, op *pipeline.Op, in *UpdateRecordInput) (*RecordResult, error) {
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
	if err := h.s.PutRecord(op.Tx, r); err != nil {
		return nil, err
	}
	touch(op, r)
	return &RecordResult{Record: r}, nil
}

func (h *handler) deleteRecord(_ context.Context, op *pipeline.Op, in *DeleteRecordInput) (*DeletedResult, error) {
	r, err := h.deletableRecord(op, in)
	if err != nil {
		return nil, err
	}
	if err := h.s.DeleteRecord(op.Tx, r.ProjectID, r.ID); err != nil {
		return nil, err
	}
	touch(op, r)
	return &DeletedResult{Deleted: Deleted{ID: r.ID, Revision: r.Revision}}, nil
}

// previewRecord shows the record an unconfirmed delete_record would
// delete, or answers the refusal the confirmed call would meet.
func (h *handler) previewRecord(_ context.Context, op *pipeline.Op, in *DeleteRecordInput) (any, error) {
	r, err := h.deletableRecord(op, in)
	if err != nil {
		return nil, err
	}
	return &RecordResult{Record: r}, nil
}

// deletableRecord loads the record a delete_record call names and refuses
// it as the deletion would be refused: NOT_FOUND, REVISION_CONFLICT or
// RECORD_LOCKED. The confirmed call and its preview both go through it, so
// that a preview never invites a confirmation that would fail.
func (h *handler) deletableRecord(op *pipeline.Op, in *DeleteRecordInput) (*Record, error) {
	r, err := h.record(op, in.RecordRef)
	if err != nil {
		return nil, err
	}
	if err := checkRevision(op, r, in.ExpectedRevision); err != nil {
		return nil, err
	}
	if r.Locked {
		return nil, refuse(op, r, recordLocked())
	}
	return r, nil
}

func (h *handler) listRecords(_ context.Context, op *pipeline.Op, in *ListRecordsInput) (*RecordList, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	page, more, err := h.s.Records(op.Tx, p.ID, in.Cursor, in.limit())
	if err != nil {
		return nil, err
	}
	return &RecordList{Records: orEmpty(page), NextCursor: nextCursor(page, more)}, nil
}

func (h *handler) getRecord(_ context.Context, op *pipeline.Op, in *GetRecordInput) (*RecordResult, error) {
	r, err := h.record(op, in.RecordRef)
	if err != nil {
		return nil, err
	}
	return &RecordResult{Record: r}, nil
}
