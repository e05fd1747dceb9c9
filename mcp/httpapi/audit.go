package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb/boltlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// Audit is what the audit API serves: the log, the storage it lives in,
// and the verifier key auditors check its checkpoints with.
type Audit struct {
	Log         boltlog.Log
	Storage     kv.Transactor
	VerifierKey string
}

// Bounds of a page of the event list.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

// routeAudit registers the audit API: read-only, for callers with the
// audit scope.
func (s *server) routeAudit(mux *http.ServeMux) {
	for pattern, h := range map[string]http.HandlerFunc{
		"GET /v1/audit/events":            s.auditEvents,
		"GET /v1/audit/events/{ref}":      s.auditEvent,
		"GET /v1/audit/checkpoint":        s.auditCheckpoint,
		"GET /v1/audit/checkpoints":       s.auditCheckpoints,
		"GET /v1/audit/proof/consistency": s.auditConsistency,
		"GET /v1/audit/key":               s.auditKey,
		"GET /v1/audit/export":            s.auditExport,
	} {
		mux.Handle(pattern, s.cfg.Authenticate(s.auditScope(h)))
	}
}

// auditScope refuses a caller without the audit scope.
func (s *server) auditScope(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, _ := s.cfg.Caller(r.Context()); !c.Scopes.Has(pipeline.ScopeAudit) {
			s.fail(w, r, pipeline.Errorf(pipeline.PermissionDenied, "The caller's scopes do not allow the audit API; it needs a token with the audit scope."))
			return
		}
		next(w, r)
	}
}

// view runs fn in a read transaction of the log's storage; a failure is
// answered, and view reports false.
func (s *server) view(w http.ResponseWriter, r *http.Request, fn func(tx *kv.Tx) error) bool {
	err := s.cfg.Audit.Storage.View(r.Context(), fn)
	if err == nil {
		return true
	}
	var e *pipeline.Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, auditlog.ErrNotFound):
		e = pipeline.Errorf(pipeline.NotFound, "The audit log has no such event or checkpoint.")
	case errors.Is(err, auditlog.ErrNoCheckpoint):
		e = pipeline.Errorf(pipeline.NotFound, "The audit log has no signed checkpoint yet; one is signed within the checkpoint interval of a write, and at shutdown.")
	default:
		s.cfg.Logger.Error("audit API", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
		e = pipeline.Public(err)
	}
	s.fail(w, r, e)
	return false
}

// auditEvents serves the list, with filters that combine and a cursor.
func (s *server) auditEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := filterOf(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit, after := defaultAuditLimit, uint64(0)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditLimit {
			s.fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameter limit must be a whole number from 1 to %d.", maxAuditLimit))
			return
		}
		limit = n
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameter after must be the next cursor of a previous page."))
			return
		}
		after = n
	}
	var page struct {
		Events []*auditlog.Event `json:"events"`
		Next   string            `json:"next,omitempty"`
	}
	ok := s.view(w, r, func(tx *kv.Tx) error {
		events, next, err := s.cfg.Audit.Log.List(tx, f, after, limit)
		page.Events = events
		if next != 0 {
			page.Next = strconv.FormatUint(next, 10)
		}
		return err
	})
	if ok {
		if page.Events == nil {
			page.Events = []*auditlog.Event{}
		}
		writeJSON(w, http.StatusOK, page)
	}
}

// filterOf reads the list's filters; a malformed one is INVALID_INPUT that
// names the parameter, not its value.
func filterOf(q url.Values) (auditlog.Filter, *pipeline.Error) {
	f := auditlog.Filter{
		Tool: q.Get("tool"), Principal: q.Get("principal"), Outcome: q.Get("outcome"), Code: q.Get("code"),
		Key: q.Get("key"), Target: q.Get("target"), RequestID: q.Get("request_id"),
	}
	for name, into := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, pipeline.Errorf(pipeline.InvalidInput, "The parameter %s must be a time in RFC 3339, such as 2026-11-30T06:00:00Z.", name)
			}
			*into = t
		}
	}
	return f, nil
}

// proof is an inclusion proof of an event in a signed tree.
type proof struct {
	Size   uint64      `json:"size"`
	Root   tlog.Hash   `json:"root"`
	Hashes []tlog.Hash `json:"hashes"`
}

// auditEvent serves one event by ULID or sequence number, with its
// inclusion proof in the tree of the latest checkpoint, if that covers it.
func (s *server) auditEvent(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("ref")
	var answer struct {
		Event *auditlog.Event `json:"event"`
		Proof *proof          `json:"proof,omitempty"`
	}
	ok := s.view(w, r, func(tx *kv.Tx) error {
		var err error
		if seq, perr := strconv.ParseUint(ref, 10, 64); perr == nil {
			answer.Event, err = s.cfg.Audit.Log.Get(tx, seq)
		} else if _, perr := ulid.ParseStrict(ref); perr == nil {
			answer.Event, err = s.cfg.Audit.Log.ByID(tx, ref)
		} else {
			return pipeline.Errorf(pipeline.InvalidInput, "An event is named by its id (a ULID) or its sequence number.")
		}
		if err != nil {
			return err
		}
		size, signed, err := s.cfg.Audit.Log.LatestCheckpoint(tx)
		if errors.Is(err, auditlog.ErrNotFound) || size < answer.Event.Seq {
			return nil // no signed tree covers it yet
		}
		if err != nil {
			return err
		}
		c, err := auditlog.ParseSigned(signed)
		if err != nil {
			return err
		}
		hashes, err := s.cfg.Audit.Log.InclusionProof(tx, size, answer.Event.Seq)
		answer.Proof = &proof{Size: size, Root: c.Root, Hashes: hashes}
		return err
	})
	if ok {
		writeJSON(w, http.StatusOK, answer)
	}
}

// auditCheckpoint serves the latest signed checkpoint, as its note.
func (s *server) auditCheckpoint(w http.ResponseWriter, r *http.Request) {
	var signed []byte
	if s.view(w, r, func(tx *kv.Tx) error {
		var err error
		_, signed, err = s.cfg.Audit.Log.LatestCheckpoint(tx)
		return err
	}) {
		writeText(w, signed)
	}
}

// auditCheckpoints serves every signed checkpoint, smallest tree first.
func (s *server) auditCheckpoints(w http.ResponseWriter, r *http.Request) {
	var all []string
	if s.view(w, r, func(tx *kv.Tx) error {
		cps, err := s.cfg.Audit.Log.SignedCheckpoints(tx)
		for _, c := range cps {
			all = append(all, string(c))
		}
		return err
	}) {
		if all == nil {
			all = []string{}
		}
		writeJSON(w, http.StatusOK, map[string][]string{"checkpoints": all})
	}
}

// auditConsistency serves a proof that the tree of size new extends the
// tree of size old.
func (s *server) auditConsistency(w http.ResponseWriter, r *http.Request) {
	old, err1 := strconv.ParseUint(r.URL.Query().Get("old"), 10, 64)
	new, err2 := strconv.ParseUint(r.URL.Query().Get("new"), 10, 64)
	if err1 != nil || err2 != nil || old == 0 || old > new {
		s.fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameters old and new must be tree sizes with 1 <= old <= new."))
		return
	}
	var hashes tlog.TreeProof
	if s.view(w, r, func(tx *kv.Tx) error {
		var err error
		hashes, err = s.cfg.Audit.Log.ConsistencyProof(tx, old, new)
		return err
	}) {
		writeJSON(w, http.StatusOK, map[string]any{"old": old, "new": new, "hashes": hashes})
	}
}

// auditKey serves the verifier key of the log's checkpoints.
func (s *server) auditKey(w http.ResponseWriter, r *http.Request) {
	writeText(w, []byte(s.cfg.Audit.VerifierKey+"\n"))
}

// auditExport streams an export from the event ?from= (default 1) through
// the latest checkpoint.
func (s *server) auditExport(w http.ResponseWriter, r *http.Request) {
	from := uint64(1)
	if v := r.URL.Query().Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			s.fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameter from must be a sequence number, from 1."))
			return
		}
		from = n
	}
	// The export streams from one read transaction, so that it holds one
	// consistent state; once its first line is out, a failure can only cut
	// it short, which its verification then reports.
	s.view(w, r, func(tx *kv.Tx) error {
		if _, _, err := s.cfg.Audit.Log.LatestCheckpoint(tx); err != nil {
			return auditlog.ErrNoCheckpoint
		}
		w.Header().Set("Content-Type", "application/jsonl")
		w.WriteHeader(http.StatusOK)
		if err := s.cfg.Audit.Log.Export(tx, w, from, s.cfg.Audit.VerifierKey); err != nil {
			s.cfg.Logger.Error("audit export cut short", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
		}
		return nil
	})
}

func writeText(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
