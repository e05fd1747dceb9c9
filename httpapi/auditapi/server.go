package auditapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
)

// Server serves the audit protocol from a log's store: read-only, to
// callers with the audit scope.
type Server struct {
	// Log is the store the log lives in.
	Log auditlog.Viewer
	// VerifierKey is the key auditors check the log's checkpoints with, in
	// note's text form.
	VerifierKey string
	// Caller reads the caller the daemon's authentication put in the
	// request's context.
	Caller func(ctx context.Context) (pipeline.Caller, bool)
	Logger *slog.Logger
	// Sign, if set, signs a checkpoint of the log as it is now, unless it
	// did not grow since the latest (auditlog.Checkpointer.Sign): POST
	// /v1/audit/checkpoint, at most once a second.
	Sign func(ctx context.Context) (bool, error)
	// TlogPublic serves the tlog paths (tlog.go: the checkpoint and the
	// tiles, read-only) to anyone, without a token: writerd serve
	// --audit-public, for monitors and witnesses. The rest stays guarded.
	TlogPublic bool

	signing  sync.Mutex // one sign-now at a time, SignEvery apart
	lastSign time.Time
}

// SignEvery is the shortest time between two checkpoints signed on
// request (POST /v1/audit/checkpoint): a request sooner waits for it, so
// that no caller can make the daemon sign in a loop.
const SignEvery = time.Second

// Register adds the protocol's routes to mux, each behind guard (the
// daemon's authentication), so that the daemon's edge counts and logs
// them by their own patterns.
func (s *Server) Register(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	for pattern, h := range map[string]http.HandlerFunc{
		"GET " + pathEvents:          s.events,
		"GET " + pathEvent + "{ref}": s.event,
		"GET " + pathCheckpoint:      s.checkpoint,
		"GET " + pathCheckpoints:     s.checkpoints,
		"GET " + pathConsistency:     s.consistency,
		"GET " + pathKey:             s.key,
		"GET " + pathExport:          s.export,
	} {
		mux.Handle(pattern, guard(s.auditScope(h)))
	}
	s.registerTlog(mux, guard) // tlog.go
	if s.Sign != nil {
		mux.Handle("POST "+pathCheckpoint, guard(s.auditScope(s.signNow)))
	}
}

// auditScope refuses a caller without the audit scope.
func (s *Server) auditScope(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, _ := s.Caller(r.Context()); !c.Scopes.Has(pipeline.ScopeAudit) {
			fail(w, r, pipeline.Errorf(pipeline.PermissionDenied, "The caller's scopes do not allow the audit API; it needs a token with the audit scope."))
			return
		}
		next(w, r)
	}
}

// fail writes an error as the envelope every writerd transport uses.
func fail(w http.ResponseWriter, r *http.Request, e *pipeline.Error) {
	(&pipeline.Result{RequestID: pipeline.RequestID(r.Context()), Err: e}).WriteError(w)
}

// answer answers err, an error of a read: a store's own (a closed store is
// UNAVAILABLE), something that does not exist, or INTERNAL with its cause
// in the log.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, err error) {
	var e *pipeline.Error
	switch {
	case errors.As(err, &e):
		// A pipeline error may be an INTERNAL with a private message;
		// Public answers it with the fixed one (and drops a Detail the
		// code may not carry), and the message and cause go to the log.
		cause := err.Error()
		if e.Err != nil {
			cause += ": " + e.Err.Error()
		}
		if e = pipeline.Public(err); e.Code == pipeline.Internal {
			s.Logger.Error("audit API", "request_id", pipeline.RequestID(r.Context()), "cause", cause)
		}
	case errors.As(err, new(*auditlog.DamageError)):
		// The daemon's own check of its log failed: it signs nothing
		// more until it restarts. The sentence names the first bad event,
		// which an auditor may know (it reads the log anyway).
		s.Logger.Warn("audit API: no checkpoint signed", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
		e = pipeline.Errorf(pipeline.Unavailable, "The daemon signs no checkpoint: %s; writerd audit verify says more.", err.Error())
	case errors.As(err, new(*auditlog.FormatError)):
		// A newer replica wrote an event this daemon cannot read
		// whole: it says so rather than answer it with members missing.
		e = pipeline.Errorf(pipeline.Unavailable, "The audit log holds an event this daemon cannot read: %s.", err.Error())
	case errors.Is(err, auditlog.ErrNotFound), errors.Is(err, ErrNoEvent):
		e = pipeline.Errorf(pipeline.NotFound, "The audit log has no such event or checkpoint.")
	case errors.Is(err, auditlog.ErrNoCheckpoint):
		e = pipeline.Errorf(pipeline.NotFound, "The audit log has no signed checkpoint yet; one is signed within the checkpoint interval of a write, and at shutdown.")
	default:
		s.Logger.Error("audit API", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
		e = pipeline.Public(err)
	}
	fail(w, r, e)
}

// view runs fn on the log; a failure is answered, and view reports false.
func (s *Server) view(w http.ResponseWriter, r *http.Request, fn func(auditlog.Reader) error) bool {
	if err := s.Log.View(r.Context(), fn); err != nil {
		s.answer(w, r, err)
		return false
	}
	return true
}

// events serves the list, with filters that combine and a cursor.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, perr := filterOf(q)
	if perr != nil {
		fail(w, r, perr)
		return
	}
	limit, after := DefaultLimit, uint64(0)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameter limit must be a whole number from 1 to %d.", MaxLimit))
			return
		}
		limit = n
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameter after must be the next cursor of a previous page."))
			return
		}
		after = n
	}
	events, next, err := Local{s.Log}.List(r.Context(), f, after, limit)
	if err != nil {
		s.answer(w, r, err)
		return
	}
	page := Page{Events: events}
	if page.Events == nil {
		page.Events = []*auditlog.Event{}
	}
	if next != 0 {
		page.Next = strconv.FormatUint(next, 10)
	}
	writeJSON(w, page)
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

// query is the list's filters as parameters, for the client.
func query(f auditlog.Filter) url.Values {
	q := url.Values{}
	for name, v := range map[string]string{
		"tool": f.Tool, "principal": f.Principal, "outcome": f.Outcome, "code": f.Code,
		"key": f.Key, "target": f.Target, "request_id": f.RequestID,
	} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// event serves one event by ULID or sequence number, with its inclusion
// proof in the tree of the latest checkpoint, if that covers it.
func (s *Server) event(w http.ResponseWriter, r *http.Request) {
	// ParseRef, as Local and Client name events, so that a ref such as
	// "007" or "0" names no event here either.
	seq, id, ok := ParseRef(r.PathValue("ref"))
	if !ok {
		fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "An event is named by its id (a ULID) or its sequence number."))
		return
	}
	p, err := Local{s.Log}.proven(r.Context(), seq, id)
	if err != nil {
		s.answer(w, r, err)
		return
	}
	writeJSON(w, EventAnswer{Event: p.Event, Leaf: p.Canonical, Proof: p.Proof})
}

// checkpoint serves the latest signed checkpoint, as its note.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	var signed []byte
	if s.view(w, r, func(lr auditlog.Reader) error {
		var err error
		_, signed, err = lr.LatestCheckpoint()
		return err
	}) {
		writeText(w, signed)
	}
}

// signNow signs a checkpoint of the log as it is now, then serves the
// latest, as GET does: an auditor who wants every event so far covered
// (writerd audit checkpoint --now) need not wait for the interval.
func (s *Server) signNow(w http.ResponseWriter, r *http.Request) {
	s.signing.Lock()
	wait := time.Until(s.lastSign.Add(SignEvery))
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			s.signing.Unlock()
			return
		}
	}
	_, err := s.Sign(r.Context())
	s.lastSign = time.Now()
	s.signing.Unlock()
	if err != nil {
		s.answer(w, r, err)
		return
	}
	s.checkpoint(w, r)
}

// checkpoints serves every signed checkpoint, smallest tree first.
func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) {
	cps, err := Local{s.Log}.Checkpoints(r.Context())
	if err != nil {
		s.answer(w, r, err)
		return
	}
	list := CheckpointList{Checkpoints: make([]string, len(cps))}
	for i, c := range cps {
		list.Checkpoints[i] = string(c)
	}
	writeJSON(w, list)
}

// consistency serves a proof that the tree of size new extends the tree
// of size old.
func (s *Server) consistency(w http.ResponseWriter, r *http.Request) {
	old, err1 := strconv.ParseUint(r.URL.Query().Get("old"), 10, 64)
	new, err2 := strconv.ParseUint(r.URL.Query().Get("new"), 10, 64)
	if err1 != nil || err2 != nil || old == 0 || old > new {
		fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameters old and new must be tree sizes with 1 <= old <= new."))
		return
	}
	var hashes tlog.TreeProof
	if s.view(w, r, func(lr auditlog.Reader) error {
		var err error
		hashes, err = auditlog.ConsistencyProof(lr, old, new)
		return err
	}) {
		writeJSON(w, Consistency{Old: old, New: new, Hashes: hashes})
	}
}

// key serves the verifier key of the log's checkpoints.
func (s *Server) key(w http.ResponseWriter, r *http.Request) {
	if s.VerifierKey == "" { // the store, and so the log's key, is not open yet
		fail(w, r, pipeline.Errorf(pipeline.Unavailable, "The daemon's store is not open yet, so the log's key is not known; try again shortly."))
		return
	}
	writeText(w, []byte(s.VerifierKey+"\n"))
}

// export streams an export from the event ?from= (default 1) through the
// latest checkpoint.
func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	from := uint64(1)
	if v := r.URL.Query().Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "The parameter from must be a sequence number, from 1."))
			return
		}
		from = n
	}
	// The export streams from one read transaction, so that it holds one
	// consistent state; once its first line is out, a failure can only cut
	// it short, which its verification then reports.
	s.view(w, r, func(lr auditlog.Reader) error {
		// Only a missing checkpoint is ErrNoCheckpoint; a failed read goes
		// out as the error it is (INTERNAL, with its cause in the log).
		_, _, err := lr.LatestCheckpoint()
		if errors.Is(err, auditlog.ErrNotFound) {
			return auditlog.ErrNoCheckpoint
		}
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/jsonl")
		w.WriteHeader(http.StatusOK)
		if err := auditlog.Export(lr, w, from, s.VerifierKey); err != nil {
			s.Logger.Error("audit export cut short", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
		}
		return nil
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

func writeText(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
