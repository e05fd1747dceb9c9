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

// Bounds of delete_records.
const (
	// maxBatch is the most ids record_ids takes, and the most records one
	// call attempts.
	maxBatch = 200
	// previewSample is the most ids a preview shows.
	previewSample = 10
	// maxFilterFields is the most field conditions a filter takes.
	maxFilterFields = 8
	// maxTimestamp is the longest RFC 3339 time a filter takes, with
	// nanoseconds and an offset: 2006-01-02T15:04:05.999999999+07:00.
	maxTimestamp = 35
)

// DeleteRecordsInput is the input of delete_records. Exactly one of
// RecordIDs and Filter is given; its schema says so (JSONSchemaExtend).
type DeleteRecordsInput struct {
	pipeline.Key
	pipeline.Confirm
	ProjectRef
	RecordIDs []string      `json:"record_ids,omitempty" jsonschema:"minItems=1,maxItems=200,uniqueItems=true,pattern=^[0-9A-HJKMNP-TV-Z]{26}$,maxLength=26" jsonschema_description:"The records to delete, by id: 1 to 200 distinct ids, attempted in id order. Ids that name no record of the project are reported in not_found. Exactly one of record_ids and filter."`
	Filter    *RecordFilter `json:"filter,omitempty" jsonschema_description:"Selects the project's records that meet every condition given; {} selects all of them. At most 200 are attempted per call, in id (creation) order. Exactly one of record_ids and filter."`
}

// JSONSchemaExtend states what struct tags cannot: exactly one of
// record_ids and filter. Each form also forbids the other, so that a call
// with both is refused as matching neither form, which it does not.
func (DeleteRecordsInput) JSONSchemaExtend(s *pipeline.Schema) {
	s.OneOf = []*pipeline.Schema{
		{Required: []string{"record_ids"}, Not: &pipeline.Schema{Required: []string{"filter"}}},
		{Required: []string{"filter"}, Not: &pipeline.Schema{Required: []string{"record_ids"}}},
	}
}

// RecordFilter selects records of a project: a record is selected if it
// meets every condition given. The empty filter selects every record.
type RecordFilter struct {
	Fields        FieldConditions `json:"fields,omitempty" jsonschema_description:"Records whose fields hold each member given, with an equal value of the same type (strings compared exactly); at most 8."`
	TitlePrefix   string          `json:"title_prefix,omitempty" jsonschema:"minLength=1,maxLength=200" jsonschema_description:"Records whose title begins with this text, compared exactly (case-sensitive, code point by code point); a single line without control or format characters."`
	CreatedAfter  Timestamp       `json:"created_after,omitempty" jsonschema_description:"Records created strictly after this time: RFC 3339, such as 2026-01-02T15:04:05Z."`
	CreatedBefore Timestamp       `json:"created_before,omitempty" jsonschema_description:"Records created strictly before this time: RFC 3339, such as 2026-01-02T15:04:05Z."`
	Locked        *bool           `json:"locked,omitempty" jsonschema_description:"true selects only locked records (each of which is refused with RECORD_LOCKED); false only unlocked ones."`
}

// FieldConditions are a filter's field equalities: a record matches if its
// fields hold each member with an equal value of the same type.
type FieldConditions map[string]any

// JSONSchema bounds FieldConditions as Fields is bounded, with fewer
// members.
func (FieldConditions) JSONSchema() *pipeline.Schema {
	s := Fields(nil).JSONSchema()
	s.MaxProperties = ptr[uint64](maxFilterFields)
	return s
}

// Timestamp is an RFC 3339 time in an input, as text; the input's Validate
// parses it.
type Timestamp string

// JSONSchema states the form of a Timestamp. The validator does not assert
// "format", so the pattern does, and Validate checks the date itself.
func (Timestamp) JSONSchema() *pipeline.Schema {
	return &pipeline.Schema{
		Type:      "string",
		Format:    "date-time",
		MaxLength: ptr[uint64](maxTimestamp),
		Pattern:   "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$",
	}
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

// DeleteRecordsResult is the output of delete_records.
type DeleteRecordsResult struct {
	Attempted  int            `json:"attempted" jsonschema:"minimum=0,maximum=200" jsonschema_description:"How many selected ids the call went through, in id order: at most 200."`
	Deleted    int            `json:"deleted" jsonschema:"minimum=0,maximum=200" jsonschema_description:"How many records it deleted."`
	DeletedIDs []string       `json:"deleted_ids" jsonschema:"maxItems=200" jsonschema_description:"The ids of the records it deleted, in id order."`
	Refused    []RefusedGroup `json:"refused" jsonschema:"maxItems=200" jsonschema_description:"The records it did not delete because a rule refused them, as delete_record would have, grouped by code; the largest group first."`
	NotFound   []string       `json:"not_found" jsonschema:"maxItems=200" jsonschema_description:"The ids that name no record of the project, in id order."`
	Remaining  int            `json:"remaining" jsonschema:"minimum=0" jsonschema_description:"How many records of the project still match the selection after this call, the refused ones included."`
	Next       string         `json:"next,omitempty" jsonschema_description:"Present only when more records match than the call attempted: how to continue."`
}

// RefusedGroup is the records of one refusal code.
type RefusedGroup struct {
	Code  pipeline.Code `json:"code" jsonschema_description:"The code delete_record answers for each of these records, such as RECORD_LOCKED."`
	Count int           `json:"count" jsonschema:"minimum=1,maximum=200" jsonschema_description:"How many records were refused with the code."`
	IDs   []string      `json:"ids" jsonschema:"maxItems=200" jsonschema_description:"Their ids, in id order."`
}

// DeleteRecordsPreview is the preview of an unconfirmed delete_records:
// the error envelope's "preview".
type DeleteRecordsPreview struct {
	Matched      int            `json:"matched"`
	WouldAttempt int            `json:"would_attempt"`
	WouldRefuse  []RefusalCount `json:"would_refuse"`
	MoreThanCap  bool           `json:"more_than_cap"`
	Sample       []string       `json:"sample"`
}

// RefusalCount is how many records a preview would see refused with one
// code.
type RefusalCount struct {
	Code  pipeline.Code `json:"code"`
	Count int           `json:"count"`
}

// DeleteRecordsAborted is the "detail" of a delete_records call that a
// fault stopped: the call was rolled back as a whole.
type DeleteRecordsAborted struct {
	// Deleted is always 0: nothing the call deleted before the fault
	// stays deleted.
	Deleted int `json:"deleted"`
	// StoppedAt is the id of the record the fault met, absent if the call
	// stopped before it reached one (while selecting).
	StoppedAt string `json:"stopped_at,omitempty"`
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
