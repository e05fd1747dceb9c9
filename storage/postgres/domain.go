package postgres

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/handlers"
)

// domain is the built-in tools' store of a transaction. The database
// keeps their rules across replicas: a unique index on a name's
// comparison key, a foreign key from a record to its project, and row
// locks on what a write reads (FOR UPDATE), so that no other replica
// changes it between the read and the write. Statements report a
// conflict by what they return instead of raising one where they can,
// since a failed statement ends what else the write could do.
type domain struct{ t *tx }

var _ handlers.Store = domain{}

func decode[T any](b []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("pgdb: decode %T: %w", v, err)
	}
	return v, nil
}

// one reads one entity's JSON, or nil.
func one[T any](t *tx, what, sql string, args ...any) (*T, error) {
	var b []byte
	err := t.q.QueryRow(t.ctx, sql, args...).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err := t.check(what, err); err != nil {
		return nil, err
	}
	return decode[T](b)
}

// page reads up to limit entities' JSON, and whether more follow.
func page[T any](t *tx, what string, limit int, sql string, args ...any) ([]*T, bool, error) {
	rows, err := t.q.Query(t.ctx, sql, append(args, limit+1)...)
	if err != nil {
		return nil, false, t.check(what, err)
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, false, t.check(what, err)
	}
	more := len(docs) > limit
	if more {
		docs = docs[:limit]
	}
	out := make([]*T, 0, len(docs))
	for _, b := range docs {
		v, err := decode[T](b)
		if err != nil {
			return nil, false, err
		}
		out = append(out, v)
	}
	return out, more, nil
}

func (d domain) Project(id string) (*handlers.Project, error) {
	p, err := one[handlers.Project](d.t, "read a project", "SELECT doc FROM projects WHERE id = $1"+d.t.forUpdate(), id)
	if err == nil && p == nil {
		err = handlers.ProjectNotFound()
	}
	return p, err
}

func nameKey(name string) (string, error) {
	k, err := handlers.NameKey(name)
	if err != nil {
		return "", fmt.Errorf("pgdb: a project name has no comparison key: %w", err)
	}
	return k, nil
}

func (d domain) ProjectByName(name string) (*handlers.Project, error) {
	key, err := nameKey(name)
	if err != nil {
		return nil, err
	}
	return one[handlers.Project](d.t, "read a project by name", "SELECT doc FROM projects WHERE name_key = $1", key)
}

// PutProject creates or replaces p, in one statement: unless another
// project holds its name's comparison key, which is then an answer and not
// an error (the transaction goes on, and the handler may read the holder).
// The unique index keeps the name if another replica commits it in
// between: that violation (23505) is the same refusal, but the failed
// statement has aborted the (sub)transaction, so in that rare race the
// handler cannot read, and so name, the holder.
func (d domain) PutProject(p *handlers.Project) error {
	key, err := nameKey(p.Name)
	if err != nil {
		return err
	}
	doc, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("pgdb: encode a project: %w", err)
	}
	var taken bool
	err = d.t.queryRow("store a project", "WITH holder AS (SELECT 1 FROM projects WHERE name_key = $2 AND id <> $1), "+
		"put AS (INSERT INTO projects (id, name_key, doc) SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM holder) "+
		"ON CONFLICT (id) DO UPDATE SET name_key = EXCLUDED.name_key, doc = EXCLUDED.doc) "+
		"SELECT EXISTS (SELECT 1 FROM holder)", []any{p.ID, key, doc}, &taken)
	switch {
	case isCode(err, "23505"):
		return handlers.NameTaken()
	case err != nil:
		return err
	case taken:
		return handlers.NameTaken()
	}
	return nil
}

// DeleteProject deletes the project unless it has records; the foreign
// key keeps a record another replica adds meanwhile.
func (d domain) DeleteProject(id string) error {
	tag, err := d.t.exec("delete a project", "DELETE FROM projects WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM records WHERE project_id = $1)", id)
	if isCode(err, "23503") {
		return handlers.ProjectNotEmpty()
	}
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var exists bool
	if err := d.t.queryRow("read a project", "SELECT EXISTS (SELECT 1 FROM projects WHERE id = $1)", []any{id}, &exists); err != nil {
		return err
	}
	if !exists {
		return handlers.ProjectNotFound()
	}
	return handlers.ProjectNotEmpty()
}

func (d domain) HasRecords(projectID string) (bool, error) {
	var has bool
	err := d.t.queryRow("look for records", "SELECT EXISTS (SELECT 1 FROM records WHERE project_id = $1)", []any{projectID}, &has)
	return has, err
}

func (d domain) Projects(after string, limit int) ([]*handlers.Project, bool, error) {
	return page[handlers.Project](d.t, "list projects", limit, "SELECT doc FROM projects WHERE id > $1 ORDER BY id LIMIT $2", after)
}

func (d domain) Record(projectID, id string) (*handlers.Record, error) {
	r, err := one[handlers.Record](d.t, "read a record", "SELECT doc FROM records WHERE project_id = $1 AND id = $2"+d.t.forUpdate(), projectID, id)
	if err == nil && r == nil {
		err = handlers.RecordNotFound()
	}
	return r, err
}

// PutRecord creates or replaces r; a project another replica deleted
// meanwhile is NOT_FOUND, by the foreign key.
func (d domain) PutRecord(r *handlers.Record) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("pgdb: encode a record: %w", err)
	}
	_, err = d.t.exec("store a record", "INSERT INTO records (project_id, id, doc) VALUES ($1, $2, $3) "+
		"ON CONFLICT (project_id, id) DO UPDATE SET doc = EXCLUDED.doc", r.ProjectID, r.ID, doc)
	if isCode(err, "23503") {
		return handlers.ProjectNotFound()
	}
	return err
}

func (d domain) DeleteRecord(projectID, id string) error {
	tag, err := d.t.exec("delete a record", "DELETE FROM records WHERE project_id = $1 AND id = $2", projectID, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return handlers.RecordNotFound()
	}
	return nil
}

func (d domain) Records(projectID, after string, limit int) ([]*handlers.Record, bool, error) {
	return page[handlers.Record](d.t, "list records", limit,
		"SELECT doc FROM records WHERE project_id = $1 AND id > $2 ORDER BY id LIMIT $3", projectID, after)
}
