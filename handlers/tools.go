package handlers

import "github.com/writerd/writerd/pipeline"

// Tools returns the built-in tools. Their handlers work through the
// domain store each call's transaction hands out (op.Store), whatever
// the backend: a Pipeline[Store] on a Storage[Store].
func Tools() []*pipeline.Tool[Store] {
	h := &handler{}
	return []*pipeline.Tool[Store]{
		pipeline.MustDefine(pipeline.Spec[Store, CreateProjectInput, ProjectResult]{
			Name:  "create_project",
			Title: "Create a project",
			Description: "Creates a project with a unique name (compared without regard to case). Retrying with the same idempotency_key " +
				"returns the first answer instead of creating a second project.",
			Run: h.createProject,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, UpdateProjectInput, ProjectResult]{
			Name:  "update_project",
			Title: "Update a project",
			Description: "Changes the given members of a project whose revision is expected_revision, and increments " +
				"its revision. Retrying with the same idempotency_key returns the first answer.",
			Overwrites: true,
			Run:        h.updateProject,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, DeleteProjectInput, DeletedResult]{
			Name:  "delete_project",
			Title: "Delete a project",
			Description: "Deletes an empty project. Without \"confirm\": true it deletes nothing and previews the " +
				"project, or answers the refusal the deletion would meet; send it again with the same idempotency_key " +
				"and \"confirm\": true to delete.",
			Destructive: true,
			Run:         h.deleteProject,
			Preview:     h.previewProject,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, CreateRecordInput, RecordResult]{
			Name:  "create_record",
			Title: "Create a record",
			Description: "Creates a record in a project. Retrying with the same idempotency_key returns the first " +
				"answer instead of creating a second record.",
			Run: h.createRecord,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, UpdateRecordInput, RecordResult]{
			Name:  "update_record",
			Title: "Update a record",
			Description: "Changes the given members of a record whose revision is expected_revision, and increments " +
				"its revision; a locked record accepts only an update that sets locked to false. Retrying with the " +
				"same idempotency_key returns the first answer.",
			Overwrites: true,
			Run:        h.updateRecord,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, DeleteRecordInput, DeletedResult]{
			Name:  "delete_record",
			Title: "Delete a record",
			Description: "Deletes an unlocked record. Without \"confirm\": true it deletes nothing and previews the " +
				"record, or answers the refusal the deletion would meet; send it again with the same idempotency_key " +
				"and \"confirm\": true to delete.",
			Destructive: true,
			Run:         h.deleteRecord,
			Preview:     h.previewRecord,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, DeleteRecordsInput, DeleteRecordsResult]{
			Name:  "delete_records",
			Title: "Delete records",
			Description: "Deletes up to 200 records of a project in one call, named by record_ids or selected by a filter, " +
				"each as delete_record would delete it: records a rule refuses (locked ones) are listed by code and the " +
				"rest deleted. Without \"confirm\": true it deletes nothing and previews how many records match, would be " +
				"attempted and refused, with a sample of ids; send it again with the same idempotency_key and " +
				"\"confirm\": true to delete. The call is atomic: a fault deletes nothing.",
			Destructive: true,
			Run:         h.deleteRecords,
			Preview:     h.previewRecords,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, ListProjectsInput, ProjectList]{
			Name:        "list_projects",
			Title:       "List projects",
			Description: "Lists projects oldest first, a page at a time; pass next_cursor as cursor to get the next page.",
			ReadOnly:    true,
			Run:         h.listProjects,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, GetProjectInput, ProjectResult]{
			Name:        "get_project",
			Title:       "Get a project",
			Description: "Returns a project, with its current revision.",
			ReadOnly:    true,
			Run:         h.getProject,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, ListRecordsInput, RecordList]{
			Name:        "list_records",
			Title:       "List records",
			Description: "Lists a project's records oldest first, a page at a time; pass next_cursor as cursor to get the next page.",
			ReadOnly:    true,
			Run:         h.listRecords,
		}),
		pipeline.MustDefine(pipeline.Spec[Store, GetRecordInput, RecordResult]{
			Name:        "get_record",
			Title:       "Get a record",
			Description: "Returns a record of a project, with its current revision.",
			ReadOnly:    true,
			Run:         h.getRecord,
		}),
	}
}

// handler is the receiver of the built-in handlers, which hold no state:
// the store comes with each call (op.Store).
type handler struct{}

// touch names e, as it is now, in the call's audit event.
func touch(op *pipeline.Op[Store], e entity) {
	op.Touch(e.target())
}

// refuse names e as the target of a refusal and returns err.
func refuse(op *pipeline.Op[Store], e entity, err error) error {
	touch(op, e)
	return err
}

// checkRevision refuses e, named in the audit event, if expected is given
// and is not e's revision.
func checkRevision(op *pipeline.Op[Store], e entity, expected *int64) error {
	if err := staleRevision(e, expected); err != nil {
		return refuse(op, e, err)
	}
	return nil
}

// staleRevision returns REVISION_CONFLICT if expected is given and is not
// e's revision.
func staleRevision(e entity, expected *int64) error {
	kind, _, revision := e.target()
	if expected != nil && *expected != revision {
		return revisionConflict(kind)
	}
	return nil
}

// nextCursor is the cursor of the page after page, or "" if there is none.
func nextCursor[E entity](page []E, more bool) string {
	if !more || len(page) == 0 {
		return ""
	}
	_, id, _ := page[len(page)-1].target()
	return id
}

// orEmpty returns s, or an empty slice for nil: results show [] rather
// than null, which their schemas refuse.
func orEmpty[S ~[]E, E any](s S) S {
	if s == nil {
		return S{}
	}
	return s
}

// orEmptyFields returns f, or empty Fields for nil: results show {} rather
// than null, which their schema refuses.
func orEmptyFields(f Fields) Fields {
	if f == nil {
		return Fields{}
	}
	return f
}
