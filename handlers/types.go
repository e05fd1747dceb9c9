package handlers

import (
	"time"

	"github.com/writerd/writerd/pipeline"
)

// Project is a named container of records, as stored and as returned.
type Project struct {
	ID          string    `json:"id" jsonschema_description:"The project's id (a ULID)."`
	Name        string    `json:"name" jsonschema_description:"Unique among projects, compared without regard to case; as stored, normalised to NFKC with spaces mapped as PRECIS (RFC 8266) prescribes for nicknames."`
	Description string    `json:"description" jsonschema_description:"Free text; empty if none was given."`
	Labels      []string  `json:"labels" jsonschema_description:"The project's labels, in the order given."`
	Revision    int64     `json:"revision" jsonschema_description:"Starts at 1; every update increments it."`
	CreatedAt   time.Time `json:"created_at" jsonschema_description:"When the project was created (RFC 3339, UTC)."`
	UpdatedAt   time.Time `json:"updated_at" jsonschema_description:"When the project was last changed (RFC 3339, UTC)."`
}

// Record is an entry of a project, as stored and as returned.
type Record struct {
	ID        string    `json:"id" jsonschema_description:"The record's id (a ULID)."`
	ProjectID string    `json:"project_id" jsonschema_description:"The id of the project the record belongs to."`
	Title     string    `json:"title" jsonschema_description:"A single line of text."`
	Body      string    `json:"body" jsonschema_description:"Free text; empty if none was given."`
	Fields    Fields    `json:"fields" jsonschema_description:"Named scalar values: strings, numbers and booleans."`
	Locked    bool      `json:"locked" jsonschema_description:"A locked record refuses updates and deletion until an update sets locked to false."`
	Revision  int64     `json:"revision" jsonschema_description:"Starts at 1; every update increments it."`
	CreatedAt time.Time `json:"created_at" jsonschema_description:"When the record was created (RFC 3339, UTC)."`
	UpdatedAt time.Time `json:"updated_at" jsonschema_description:"When the record was last changed (RFC 3339, UTC)."`
}

// Kinds of entity, as audit event targets name them.
const (
	kindProject = "project"
	kindRecord  = "record"
)

// entity is what the shared checks need of a Project or a Record.
type entity interface {
	target() (kind, id string, revision int64)
}

func (p *Project) target() (string, string, int64) { return kindProject, p.ID, p.Revision }
func (r *Record) target() (string, string, int64)  { return kindRecord, r.ID, r.Revision }

// Fields is a record's flat map of named scalar values: strings, numbers
// and booleans. Numbers decode as float64, exact for integers within
// ±(2^53−1), the only integers the strict parse lets through.
type Fields map[string]any

// Bounds of Fields, enforced by its schema.
const (
	maxFields      = 64
	maxFieldName   = 64
	maxFieldString = 1000
)

// JSONSchema bounds Fields, which struct tags cannot express: invopop would
// leave a map of any open and unbounded.
func (Fields) JSONSchema() *pipeline.Schema {
	return &pipeline.Schema{
		Type:          "object",
		MaxProperties: ptr[uint64](maxFields),
		PropertyNames: &pipeline.Schema{
			Type:      "string",
			Pattern:   "^[A-Za-z0-9_.-]+$",
			MinLength: ptr[uint64](1),
			MaxLength: ptr[uint64](maxFieldName),
		},
		AdditionalProperties: &pipeline.Schema{AnyOf: []*pipeline.Schema{
			{Type: "string", MaxLength: ptr[uint64](maxFieldString)},
			{Type: "number"},
			{Type: "boolean"},
		}},
	}
}

func ptr[T any](v T) *T { return &v }

// ProjectRef names a project in an input.
type ProjectRef struct {
	ProjectID string `json:"project_id" jsonschema:"pattern=^[0-9A-HJKMNP-TV-Z]{26}$,maxLength=26" jsonschema_description:"The project's id."`
}

// RecordRef names a record of a project in an input.
type RecordRef struct {
	ProjectRef
	RecordID string `json:"record_id" jsonschema:"pattern=^[0-9A-HJKMNP-TV-Z]{26}$,maxLength=26" jsonschema_description:"The record's id."`
}

// Page selects a page of a list. Absent members take their defaults.
type Page struct {
	Limit  int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100,default=50" jsonschema_description:"How many items to return at most (default 50)."`
	Cursor string `json:"cursor,omitempty" jsonschema:"pattern=^[0-9A-HJKMNP-TV-Z]{26}$,maxLength=26" jsonschema_description:"The next_cursor of the previous page, sent back unchanged (a 26-character id); absent for the first page."`
}

const defaultLimit = 50

func (pg Page) limit() int {
	if pg.Limit == 0 {
		return defaultLimit
	}
	return pg.Limit
}

// Optional input members are pointers in updates, nil exactly when absent
// (no schema accepts null), so that an update changes only what it names.
// Elsewhere they are plain values, and absence means the zero value.

// CreateProjectInput is the input of create_project.
type CreateProjectInput struct {
	pipeline.Key
	Name        string   `json:"name" jsonschema:"minLength=1,maxLength=100" jsonschema_description:"Unique among projects, compared without regard to case. Normalised as PRECIS (RFC 8266) prescribes for nicknames: NFKC, spaces mapped; no control, format, private-use or unassigned characters, and no space at either end. 1 to 100 characters (Unicode code points), also once normalised."`
	Description string   `json:"description,omitempty" jsonschema:"maxLength=2000" jsonschema_description:"Free text, any characters but NUL."`
	Labels      []string `json:"labels,omitempty" jsonschema:"maxItems=20,minLength=1,maxLength=50" jsonschema_description:"Up to 20 labels, each a single line without control or format characters."`
}

// UpdateProjectInput is the input of update_project.
type UpdateProjectInput struct {
	pipeline.Key
	ProjectRef
	ExpectedRevision int64     `json:"expected_revision" jsonschema:"minimum=1" jsonschema_description:"The project's current revision, as last read."`
	Name             *string   `json:"name,omitempty" jsonschema:"minLength=1,maxLength=100" jsonschema_description:"A new name, under the same rules as create_project's: unique among projects compared without regard to case, normalised as PRECIS prescribes for nicknames."`
	Description      *string   `json:"description,omitempty" jsonschema:"maxLength=2000" jsonschema_description:"Replaces the description: free text, any characters but NUL."`
	Labels           *[]string `json:"labels,omitempty" jsonschema:"maxItems=20,minLength=1,maxLength=50" jsonschema_description:"Replaces all labels: up to 20, each a single line without control or format characters."`
}

// DeleteProjectInput is the input of delete_project.
type DeleteProjectInput struct {
	pipeline.Key
	pipeline.Confirm
	ProjectRef
	ExpectedRevision *int64 `json:"expected_revision,omitempty" jsonschema:"minimum=1" jsonschema_description:"If given, delete only while the project has this revision."`
}

// CreateRecordInput is the input of create_record.
type CreateRecordInput struct {
	pipeline.Key
	ProjectRef
	Title  string `json:"title" jsonschema:"minLength=1,maxLength=200" jsonschema_description:"A single line: no control or format characters (Unicode Cc, Cf), such as line breaks, bidi overrides and zero-width marks."`
	Body   string `json:"body,omitempty" jsonschema:"maxLength=65536" jsonschema_description:"Free text, any characters but NUL."`
	Fields Fields `json:"fields,omitempty" jsonschema_description:"Named scalar values: each a string of at most 1000 characters without NUL, a number or a boolean; at most 64, with names of letters, digits and _.-"`
}

// UpdateRecordInput is the input of update_record.
type UpdateRecordInput struct {
	pipeline.Key
	RecordRef
	ExpectedRevision int64   `json:"expected_revision" jsonschema:"minimum=1" jsonschema_description:"The record's current revision, as last read."`
	Title            *string `json:"title,omitempty" jsonschema:"minLength=1,maxLength=200" jsonschema_description:"Replaces the title: a single line without control or format characters."`
	Body             *string `json:"body,omitempty" jsonschema:"maxLength=65536" jsonschema_description:"Replaces the body: free text, any characters but NUL."`
	Fields           *Fields `json:"fields,omitempty" jsonschema_description:"Replaces all fields: each a string of at most 1000 characters without NUL, a number or a boolean."`
	Locked           *bool   `json:"locked,omitempty" jsonschema_description:"true locks the record; false unlocks it, and is the only update a locked record accepts."`
}

// DeleteRecordInput is the input of delete_record.
type DeleteRecordInput struct {
	pipeline.Key
	pipeline.Confirm
	RecordRef
	ExpectedRevision *int64 `json:"expected_revision,omitempty" jsonschema:"minimum=1" jsonschema_description:"If given, delete only while the record has this revision."`
}

// ListProjectsInput is the input of list_projects.
type ListProjectsInput struct {
	Page
}

// GetProjectInput is the input of get_project.
type GetProjectInput struct {
	ProjectRef
}

// ListRecordsInput is the input of list_records.
type ListRecordsInput struct {
	ProjectRef
	Page
}

// GetRecordInput is the input of get_record.
type GetRecordInput struct {
	RecordRef
}

// ProjectResult is the output of the tools that return one project, and
// delete_project's preview.
type ProjectResult struct {
	Project *Project `json:"project" jsonschema_description:"The project, as it is now."`
}

// RecordResult is the output of the tools that return one record, and
// delete_record's preview.
type RecordResult struct {
	Record *Record `json:"record" jsonschema_description:"The record, as it is now."`
}

// DeletedResult is the output of the delete tools.
type DeletedResult struct {
	Deleted Deleted `json:"deleted" jsonschema_description:"The entity deleted."`
}

// Deleted names a deleted entity and the revision it had.
type Deleted struct {
	ID       string `json:"id" jsonschema_description:"The deleted entity's id."`
	Revision int64  `json:"revision" jsonschema_description:"The revision it had when it was deleted."`
}

// ProjectList is the output of list_projects.
type ProjectList struct {
	Projects   []*Project `json:"projects" jsonschema_description:"Up to limit projects, oldest first."`
	NextCursor string     `json:"next_cursor,omitempty" jsonschema_description:"Send as cursor for the next page; absent on the last page."`
}

// RecordList is the output of list_records.
type RecordList struct {
	Records    []*Record `json:"records" jsonschema_description:"Up to limit records of the project, oldest first."`
	NextCursor string    `json:"next_cursor,omitempty" jsonschema_description:"Send as cursor for the next page; absent on the last page."`
}
