package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// The writes whose outcome needs an operator (docs/DESIGN.md section 5b):
// those pending, their call outside the store in flight or their owner
// gone, and those of unknown outcome not yet resolved. GET PathOutcomes
// lists them for the admin scope, ReadOutcomes reads them from a store
// (writerd outcome list --data, and the route), and FetchOutcomes is the
// route's client: one set of wire types for the three.

// PathOutcomes is the route of the unsettled writes.
const PathOutcomes = "/v1/outcomes"

// Bounds of a page of PathOutcomes.
const (
	DefaultOutcomeLimit = 100
	MaxOutcomeLimit     = 1000
)

// The states an OutcomeWrite is in.
const (
	OutcomePending = "pending" // its call may be in flight; its owner holds it, or a takeover will
	OutcomeUnknown = "unknown" // it may have taken effect, and no answer says; an operator resolves it
)

// OutcomeWrite is one unsettled write. It holds what an operator needs to
// find the write at its upstream and resolve it, never its arguments or
// its upstream key.
type OutcomeWrite struct {
	Principal string `json:"principal"`
	Key       string `json:"key"`
	Tool      string `json:"tool"`
	State     string `json:"state"`
	// Since is when the write began: its pending record's creation.
	Since time.Time `json:"since"`
	// Attempt is the pending record's attempt: 1, and one more for each
	// takeover.
	Attempt int `json:"attempt,omitempty"`
	// LeaseUntil is when a pending write's owner must renew it, past
	// which another process takes it over.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// AuditID and Code are an unknown write's event and its code
	// (OUTCOME_UNKNOWN).
	AuditID string `json:"audit_id,omitempty"`
	Code    string `json:"code,omitempty"`
}

// OutcomePage is one page of the unsettled writes, oldest first, and the
// cursor of the next page (the after parameter) if more may follow.
type OutcomePage struct {
	Writes []OutcomeWrite `json:"writes"`
	Next   string         `json:"next,omitempty"`
}

// OutcomeQuery chooses a page: the writes after the cursor After ("" for
// the oldest), at most Limit of them, of the principal and key if set.
type OutcomeQuery struct {
	After          string
	Limit          int
	Principal, Key string
}

// Outcomes reads a page of the unsettled writes (Config.Outcomes).
type Outcomes func(ctx context.Context, q OutcomeQuery) (*OutcomePage, error)

// errCursor refuses an after parameter that no page named.
var errCursor = pipeline.Errorf(pipeline.InvalidInput, "The after parameter is not a cursor a page of unsettled writes named; send the next member of the previous page as it is.")

// ReadOutcomes reads a page of s's unsettled writes in one read
// transaction (Keys.Unsettled, which gives them oldest first). Writes of
// one creation time are ordered by principal, then key, so that pages
// neither skip nor repeat one whichever order a backend gives them in.
func ReadOutcomes[D any](ctx context.Context, s pipeline.Storage[D], q OutcomeQuery) (*OutcomePage, error) {
	if q.Limit <= 0 || q.Limit > MaxOutcomeLimit {
		q.Limit = DefaultOutcomeLimit
	}
	var after *cursor
	if q.After != "" {
		c, ok := parseCursor(q.After)
		if !ok {
			return nil, errCursor
		}
		after = &c
	}
	var recs []*idempotency.Record
	err := s.View(ctx, func(tx pipeline.Tx[D]) error {
		recs = recs[:0]
		return tx.Keys().Unsettled(func(r *idempotency.Record) error {
			if q.Principal != "" && r.Principal != q.Principal || q.Key != "" && r.Key != q.Key {
				return nil
			}
			c := cursorOf(r)
			if after != nil && c.compare(*after) <= 0 {
				return nil
			}
			// Past the page and past every write of its last creation
			// time: nothing later can belong to it.
			if len(recs) > q.Limit && r.CreatedAt.After(recs[q.Limit-1].CreatedAt) {
				return errPageFull
			}
			recs = append(recs, r)
			return nil
		})
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return nil, err
	}
	slices.SortStableFunc(recs, func(a, b *idempotency.Record) int { return cursorOf(a).compare(cursorOf(b)) })
	page := &OutcomePage{Writes: []OutcomeWrite{}}
	if len(recs) > q.Limit {
		recs = recs[:q.Limit]
		page.Next = cursorOf(recs[q.Limit-1]).String()
	}
	for _, r := range recs {
		page.Writes = append(page.Writes, outcomeWrite(r))
	}
	return page, nil
}

// errPageFull ends a walk of Unsettled that has its page.
var errPageFull = errors.New("httpapi: page full")

// outcomeWrite is what the wire shows of a record: never Args or
// UpstreamKey.
func outcomeWrite(r *idempotency.Record) OutcomeWrite {
	w := OutcomeWrite{Principal: r.Principal, Key: r.Key, Tool: r.Tool, Since: r.CreatedAt.UTC(), Attempt: r.Attempt}
	switch r.State {
	case idempotency.Pending:
		w.State = OutcomePending
		if !r.LeaseUntil.IsZero() {
			lease := r.LeaseUntil.UTC()
			w.LeaseUntil = &lease
		}
	default:
		w.State, w.AuditID, w.Code = OutcomeUnknown, r.AuditID, r.Code
	}
	return w
}

// cursor is a write's place in the order of the pages: its creation time,
// then its principal and key.
type cursor struct {
	nanos          int64
	principal, key string
}

func cursorOf(r *idempotency.Record) cursor {
	return cursor{r.CreatedAt.UnixNano(), r.Principal, r.Key}
}

func (c cursor) compare(o cursor) int {
	switch {
	case c.nanos != o.nanos:
		return cmpInt(c.nanos, o.nanos)
	case c.principal != o.principal:
		return strings.Compare(c.principal, o.principal)
	}
	return strings.Compare(c.key, o.key)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// String writes the cursor as the after parameter takes it: the nanoseconds
// and the principal and key, base64url, dot-separated.
func (c cursor) String() string {
	enc := base64.RawURLEncoding
	return strconv.FormatInt(c.nanos, 10) + "." + enc.EncodeToString([]byte(c.principal)) + "." + enc.EncodeToString([]byte(c.key))
}

func parseCursor(s string) (cursor, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return cursor{}, false
	}
	n, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return cursor{}, false
	}
	p, err1 := base64.RawURLEncoding.DecodeString(parts[1])
	k, err2 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return cursor{}, false
	}
	return cursor{n, string(p), string(k)}, true
}

// registerOutcomes serves GET PathOutcomes behind Authenticate, where the
// daemon gives its reader.
func (s *server) registerOutcomes(mux *http.ServeMux) {
	if s.cfg.Outcomes != nil {
		mux.Handle("GET "+PathOutcomes, s.cfg.Authenticate(http.HandlerFunc(s.outcomes)))
	}
}

// outcomes serves GET /v1/outcomes to callers with the admin scope (the
// writes of every principal): ?limit (default 100, at most 1000), ?after
// (the next of a previous page), ?principal and ?key (that write alone).
// The answer is an OutcomePage.
func (s *server) outcomes(w http.ResponseWriter, r *http.Request) {
	caller, _ := s.cfg.Caller(r.Context())
	if !caller.Scopes.Has(pipeline.ScopeAdmin) {
		s.fail(w, r, pipeline.Errorf(pipeline.PermissionDenied, "The caller's scopes do not allow listing the writes of every principal; it needs a token with the admin scope."))
		return
	}
	v := r.URL.Query()
	q := OutcomeQuery{After: v.Get("after"), Principal: v.Get("principal"), Key: v.Get("key"), Limit: DefaultOutcomeLimit}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxOutcomeLimit {
			s.fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The limit parameter takes a number from 1 to %d.", MaxOutcomeLimit))
			return
		}
		q.Limit = n
	}
	page, err := s.cfg.Outcomes(r.Context(), q)
	if err != nil {
		e := pipeline.Public(err)
		if e.Code == pipeline.Internal {
			s.cfg.Logger.Error("outcomes", "request_id", pipeline.RequestID(r.Context()), "cause", cause(err))
		}
		s.fail(w, r, e)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, page)
}
