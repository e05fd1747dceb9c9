package handlers

import "github.com/writerd/writerd/pipeline"

// Store is the domain store the handlers read and write through, bound to
// the call's transaction (op.Store): its changes commit with the call's
// idempotency record and audit event, or not at all. Ids are ULIDs in their
// 26-character text form, as the input schemas ensure.
//
// A refusal is an *pipeline.Error made by the constructors below, so that
// every backend answers with the same sentences; any other error is a
// storage fault, which the pipeline turns into INTERNAL or UNAVAILABLE.
type Store interface {
	// Project returns NOT_FOUND (ProjectNotFound) if there is no project
	// with the id.
	Project(id string) (*Project, error)
	// ProjectByName returns the project whose name is the same name as
	// name, compared by NameKey, or nil. It names the holder of a taken
	// name in a refusal's audit event.
	ProjectByName(name string) (*Project, error)
	// PutProject creates or replaces p, keeping names unique as NameKey
	// compares them: it returns ALREADY_EXISTS (NameTaken) if another
	// project holds a name with p.Name's key. p.Name is as the strict parse
	// normalised it.
	PutProject(p *Project) error
	// DeleteProject deletes the project and frees its name. It returns
	// NOT_FOUND (ProjectNotFound) if there is none, and PROJECT_NOT_EMPTY
	// (ProjectNotEmpty) while it has records: it keeps that invariant
	// whoever calls it.
	DeleteProject(id string) error
	// HasRecords reports whether the project has any record. It does not
	// check that the project exists.
	HasRecords(projectID string) (bool, error)
	// Projects returns up to limit projects in id order, starting after the
	// id after ("" for the first page), and whether more follow.
	Projects(after string, limit int) (page []*Project, more bool, err error)

	// Record returns NOT_FOUND (RecordNotFound) if the project has no
	// record with the id, or if there is no such project.
	Record(projectID, id string) (*Record, error)
	// PutRecord creates or replaces r in its project, which the caller has
	// checked exists.
	PutRecord(r *Record) error
	// DeleteRecord returns NOT_FOUND (RecordNotFound) if there is no such
	// record.
	DeleteRecord(projectID, id string) error
	// Records returns up to limit records of the project in id order,
	// starting after the id after ("" for the first page), and whether more
	// follow. It does not check that the project exists.
	Records(projectID, after string, limit int) (page []*Record, more bool, err error)
}

// The refusals, a fixed catalogue of sentences for the agent. Each names
// the argument it is about by JSON Pointer and never a value the caller
// sent. The first four are exported for Store implementations.

// ProjectNotFound is the NOT_FOUND of a project id.
func ProjectNotFound() *pipeline.Error {
	return pipeline.Errorf(pipeline.NotFound,
		"/project_id names no project; list_projects shows the projects that exist.")
}

// RecordNotFound is the NOT_FOUND of a record id.
func RecordNotFound() *pipeline.Error {
	return pipeline.Errorf(pipeline.NotFound,
		"/record_id names no record of the project that /project_id names; list_records shows the records that exist.")
}

// NameTaken is the ALREADY_EXISTS of a project name.
func NameTaken() *pipeline.Error {
	return pipeline.Errorf(pipeline.AlreadyExists,
		"/name is taken by another project; choose another name and send the call with a new key.")
}

// ProjectNotEmpty is the PROJECT_NOT_EMPTY of a project deletion.
func ProjectNotEmpty() *pipeline.Error {
	return pipeline.Errorf(pipeline.ProjectNotEmpty,
		"The project that /project_id names still has records; delete them first, then send the call with a new key.")
}

func revisionConflict(kind string) *pipeline.Error {
	return pipeline.Errorf(pipeline.RevisionConflict,
		"/expected_revision does not match the %s's current revision; read the %s again and send the call with a new key.", kind, kind)
}

func recordLocked() *pipeline.Error {
	return pipeline.Errorf(pipeline.RecordLocked,
		`The record is locked; unlock it with update_record and "locked": false (which may carry other changes), then send the call with a new key.`)
}
