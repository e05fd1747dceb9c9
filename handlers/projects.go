package handlers

import (
	"context"

	"github.com/writerd/writerd/pipeline"
)

// project loads a project; if it cannot, the id sought is named as the
// refusal's target.
func (h *handler) project(op *pipeline.Op, id string) (*Project, error) {
	p, err := h.s.Project(op.Tx, id)
	if err != nil {
		op.Touch(kindProject, id, 0)
		return nil, err
	}
	return p, nil
}

// claimName refuses name if a project other than the one with id holds it,
// naming the holder as the refusal's target.
func (h *handler) claimName(op *pipeline.Op, id, name string) error {
	holder, err := h.s.ProjectByName(op.Tx, name)
	if err != nil || holder == nil || holder.ID == id {
		return err
	}
	return refuse(op, holder, NameTaken())
}

func (h *handler) createProject(_ context.Context, op *pipeline.Op, in *CreateProjectInput) (*ProjectResult, error) {
	now := op.Now.UTC()
	p := &Project{
		ID:          op.NewID(),
		Name:        in.Name,
		Description: in.Description,
		Labels:      orEmpty(in.Labels),
		Revision:    1,
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	if err := h.claimName(op, p.ID, p.Name); err != nil {
		return nil, err
	}
	if err := h.s.PutProject(op.Tx, p); err != nil {
		return nil, err
	}
	touch(op, p)
	return &ProjectResult{Project: p}, nil
}

func (h *handler) updateProject(_ context.Context, op *pipeline.Op, in *UpdateProjectInput) (*ProjectResult, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	if err := checkRevision(op, p, &in.ExpectedRevision); err != nil {
		return nil, err
	}
	if in.Name != nil {
		if err := h.claimName(op, p.ID, *in.Name); err != nil {
			return nil, refuse(op, p, err)
		}
		p.Name = *in.Name
	}
	if in.Description != nil {
		p.Description = *in.Description
	}
	if in.Labels != nil {
		p.Labels = orEmpty(*in.Labels)
	}
	p.Revision++
	p.UpdatedAt = op.Now.UTC()
	if err := h.s.PutProject(op.Tx, p); err != nil {
		return nil, err
	}
	touch(op, p)
	return &ProjectResult{Project: p}, nil
}

func (h *handler) deleteProject(_ context.Context, op *pipeline.Op, in *DeleteProjectInput) (*DeletedResult, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	if err := checkRevision(op, p, in.ExpectedRevision); err != nil {
		return nil, err
	}
	// The store refuses while records remain: it keeps that invariant
	// whoever calls it.
	if err := h.s.DeleteProject(op.Tx, p.ID); err != nil {
		return nil, refuse(op, p, err)
	}
	touch(op, p)
	return &DeletedResult{Deleted: Deleted{ID: p.ID, Revision: p.Revision}}, nil
}

func (h *handler) previewProject(_ context.Context, op *pipeline.Op, in *DeleteProjectInput) (any, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	n, err := h.s.CountRecords(op.Tx, p.ID)
	if err != nil {
		return nil, err
	}
	return &ProjectPreview{Project: p, Records: n}, nil
}

func (h *handler) listProjects(_ context.Context, op *pipeline.Op, in *ListProjectsInput) (*ProjectList, error) {
	page, more, err := h.s.Projects(op.Tx, in.Cursor, in.limit())
	if err != nil {
		return nil, err
	}
	return &ProjectList{Projects: orEmpty(page), NextCursor: nextCursor(page, more)}, nil
}

func (h *handler) getProject(_ context.Context, op *pipeline.Op, in *GetProjectInput) (*ProjectResult, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	return &ProjectResult{Project: p}, nil
}
