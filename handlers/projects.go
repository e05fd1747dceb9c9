package handlers

import (
	"context"

	"github.com/writerd/writerd/pipeline"
)

// project loads a project; if it cannot, the id sought is named as the
// refusal's target.
func (h *handler) project(op *pipeline.Op[Store], id string) (*Project, error) {
	p, err := op.Store.Project(id)
	if err != nil {
		op.Touch(kindProject, id, 0)
		return nil, err
	}
	return p, nil
}

// putProject stores p. The store keeps names unique; when it refuses p's
// name, the project holding it is named as the refusal's target too.
func (h *handler) putProject(op *pipeline.Op[Store], p *Project) error {
	err := op.Store.PutProject(p)
	if pipeline.ErrorCode(err) == pipeline.AlreadyExists {
		if holder, lookupErr := op.Store.ProjectByName(p.Name); lookupErr == nil && holder != nil {
			touch(op, holder)
		}
	}
	return err
}

func (h *handler) createProject(_ context.Context, op *pipeline.Op[Store], in *CreateProjectInput) (*ProjectResult, error) {
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
	if err := h.putProject(op, p); err != nil {
		return nil, err
	}
	touch(op, p)
	return &ProjectResult{Project: p}, nil
}

func (h *handler) updateProject(_ context.Context, op *pipeline.Op[Store], in *UpdateProjectInput) (*ProjectResult, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	if err := checkRevision(op, p, &in.ExpectedRevision); err != nil {
		return nil, err
	}
	next := *p // p stays as stored, for the target of a refusal
	if in.Name != nil {
		next.Name = *in.Name
	}
	if in.Description != nil {
		next.Description = *in.Description
	}
	if in.Labels != nil {
		next.Labels = orEmpty(*in.Labels)
	}
	next.Revision++
	next.UpdatedAt = op.Now.UTC()
	if err := h.putProject(op, &next); err != nil {
		return nil, refuse(op, p, err)
	}
	touch(op, &next)
	return &ProjectResult{Project: &next}, nil
}

func (h *handler) deleteProject(_ context.Context, op *pipeline.Op[Store], in *DeleteProjectInput) (*DeletedResult, error) {
	p, err := h.deletableProject(op, in)
	if err != nil {
		return nil, err
	}
	if err := op.Store.DeleteProject(p.ID); err != nil {
		return nil, refuse(op, p, err)
	}
	touch(op, p)
	return &DeletedResult{Deleted: Deleted{ID: p.ID, Revision: p.Revision}}, nil
}

// previewProject shows the project an unconfirmed delete_project would
// delete, or answers the refusal the confirmed call would meet.
func (h *handler) previewProject(_ context.Context, op *pipeline.Op[Store], in *DeleteProjectInput) (any, error) {
	p, err := h.deletableProject(op, in)
	if err != nil {
		return nil, err
	}
	return &ProjectResult{Project: p}, nil
}

// deletableProject loads the project a delete_project call names and
// refuses it as the deletion would be refused: NOT_FOUND, REVISION_CONFLICT
// or PROJECT_NOT_EMPTY. The confirmed call and its preview both go through
// it, so that a preview never invites a confirmation that would fail.
func (h *handler) deletableProject(op *pipeline.Op[Store], in *DeleteProjectInput) (*Project, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	if err := checkRevision(op, p, in.ExpectedRevision); err != nil {
		return nil, err
	}
	// The store refuses to delete a project with records whoever calls it;
	// asking first lets the preview answer the same refusal.
	has, err := op.Store.HasRecords(p.ID)
	if err != nil {
		return nil, err
	}
	if has {
		return nil, refuse(op, p, ProjectNotEmpty())
	}
	return p, nil
}

func (h *handler) listProjects(_ context.Context, op *pipeline.Op[Store], in *ListProjectsInput) (*ProjectList, error) {
	page, more, err := op.Store.Projects(in.Cursor, in.limit())
	if err != nil {
		return nil, err
	}
	return &ProjectList{Projects: orEmpty(page), NextCursor: nextCursor(page, more)}, nil
}

func (h *handler) getProject(_ context.Context, op *pipeline.Op[Store], in *GetProjectInput) (*ProjectResult, error) {
	p, err := h.project(op, in.ProjectID)
	if err != nil {
		return nil, err
	}
	return &ProjectResult{Project: p}, nil
}
