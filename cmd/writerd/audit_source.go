package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/pipeline/boltdb"
	"github.com/writerd/writerd/pipeline/boltdb/boltlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// source is where the audit commands read the log: a data directory that
// no daemon holds (localSource), or a running daemon's audit API
// (remoteSource). Both answer alike, so that a command prints the same
// whichever it reads.
type source interface {
	// List returns up to limit events that pass f, in sequence order,
	// after the sequence number after, and the cursor to go on from, 0 if
	// no more follow.
	List(ctx context.Context, f auditlog.Filter, after uint64, limit int) ([]*auditlog.Event, uint64, error)
	// Size returns the number of events in the log.
	Size(ctx context.Context) (uint64, error)
	// Event returns the event named by ref (a sequence number or a ULID),
	// errNoEvent if there is none, with its inclusion proof in the tree of
	// the latest checkpoint if that covers it.
	Event(ctx context.Context, ref string) (*provenEvent, error)
	// Checkpoint returns the latest signed checkpoint, errNoCheckpoint if
	// there is none yet.
	Checkpoint(ctx context.Context) ([]byte, error)
	// Checkpoints returns every signed checkpoint, smallest tree first.
	Checkpoints(ctx context.Context) ([][]byte, error)
	// Events streams the events for auditlog.Verify: every event of a data
	// directory; through the latest checkpoint from a server.
	Events(ctx context.Context) (auditlog.Stream, error)
	// Export returns an export from the event from through the latest
	// checkpoint: its header and its events (errNoCheckpoint if none).
	Export(ctx context.Context, from uint64, w io.Writer, verifierKey string) error
	// VerifierKey returns the log's own verifier key and where it came
	// from, for a note.
	VerifierKey(ctx context.Context) (key, from string, err error)
	Close() error
}

// provenEvent is an event, its canonical bytes (the leaf of the tree), and
// the latest checkpoint with the event's inclusion proof in its tree.
type provenEvent struct {
	Event     *auditlog.Event
	Canonical []byte
	// Checkpoint is the latest signed checkpoint, nil if none was signed.
	Checkpoint []byte
	// Proof proves the event in the tree of the checkpoint's size; nil if
	// the checkpoint does not cover it (or there is none).
	Proof *inclusion
}

// inclusion is an inclusion proof, as the audit API serves it.
type inclusion struct {
	Size   uint64      `json:"size"`
	Root   tlog.Hash   `json:"root"`
	Hashes []tlog.Hash `json:"hashes"`
}

var (
	errNoCheckpoint = errors.New("the audit log has no signed checkpoint yet: the daemon signs one every --checkpoint-every events, every --checkpoint-interval while events come, and when it stops")
	errNoEvent      = errors.New("the audit log has no such event")
	errUnreachable  = errors.New("cannot reach the daemon")
	errHeld         = errors.New("<data>/" + boltdb.FileName + " is held by a running writerd process, so it cannot be read from the data directory; read the log through that daemon with --server URL and a token with the audit scope")
)

// canonicalEvent returns an event's canonical JSON: its stored bytes, the
// leaf of the tree, for a well-formed event.
func canonicalEvent(e *auditlog.Event) ([]byte, error) {
	if e.Targets == nil {
		e.Targets = []auditlog.Target{}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return digest.Canonical(b)
}

// parseRef reads show's argument: a sequence number or a ULID.
func parseRef(ref string) (seq uint64, id string, ok bool) {
	if n, err := strconv.ParseUint(ref, 10, 64); err == nil && n > 0 && strconv.FormatUint(n, 10) == ref {
		return n, "", true
	}
	if _, err := ulid.ParseStrict(ref); err == nil {
		return 0, ref, true
	}
	return 0, "", false
}

// localSource reads a data directory that no daemon holds, read-only.
type localSource struct {
	dir     string
	keyFile string
	db      *boltdb.DB // nil while idle
}

// openLocal opens the database in dir read-only; it creates nothing. A
// database a daemon holds is errHeld, at once.
func openLocal(dir, keyFile string) (*localSource, error) {
	l := &localSource{dir: dir, keyFile: keyFile}
	return l, l.open()
}

func (l *localSource) open() error {
	if l.db != nil {
		return nil
	}
	db, err := boltdb.OpenReadOnly(l.dir)
	switch {
	case errors.Is(err, boltdb.ErrLocked):
		return errHeld
	case errors.Is(err, boltdb.ErrNoDatabase):
		return errors.New("there is no audit log to read: <data>/" + boltdb.FileName + " does not exist (nothing was created); --data names a writerd data directory")
	case errors.Is(err, boltdb.ErrDamaged):
		return fmt.Errorf("%w; run writerd check --data DIR to list the damage", err)
	case err != nil:
		return fmt.Errorf("the store cannot be opened: %w", err)
	}
	err = db.Bolt().View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("audit_events")) == nil || tx.Bucket([]byte("audit_checkpoints")) == nil {
			return errors.New("<data>/" + boltdb.FileName + " holds no audit log with a tree: it was written by a writerd before the tree; start writerd serve on it once to add it")
		}
		return nil
	})
	if err != nil {
		db.Close()
		return err
	}
	l.db = db
	return nil
}

// idle closes the database until the next read, so that a daemon may
// start on it meanwhile (tail --follow between polls).
func (l *localSource) idle() {
	if l.db != nil {
		l.db.Close()
		l.db = nil
	}
}

func (l *localSource) Close() error {
	l.idle()
	return nil
}

// view runs fn in a read transaction, opening the database if idle.
func (l *localSource) view(fn func(tx *kv.Tx) error) error {
	if err := l.open(); err != nil {
		return err
	}
	return l.db.Bolt().View(func(tx *bolt.Tx) error { return fn(kv.Wrap(tx)) })
}

var auditLog boltlog.Log

func (l *localSource) List(_ context.Context, f auditlog.Filter, after uint64, limit int) (events []*auditlog.Event, next uint64, err error) {
	err = l.view(func(tx *kv.Tx) error {
		events, next, err = auditLog.List(tx, f, after, limit)
		return err
	})
	return events, next, err
}

func (l *localSource) Size(context.Context) (size uint64, err error) {
	err = l.view(func(tx *kv.Tx) error {
		size, err = auditLog.Size(tx)
		return err
	})
	return size, err
}

func (l *localSource) Event(_ context.Context, ref string) (*provenEvent, error) {
	seq, id, ok := parseRef(ref)
	if !ok {
		return nil, errNoEvent
	}
	p := new(provenEvent)
	err := l.view(func(tx *kv.Tx) error {
		var err error
		if id != "" {
			p.Event, err = auditLog.ByID(tx, id)
		} else {
			p.Event, err = auditLog.Get(tx, seq)
		}
		if errors.Is(err, auditlog.ErrNotFound) {
			return errNoEvent
		}
		if err != nil {
			return err
		}
		if p.Canonical, err = canonicalEvent(p.Event); err != nil {
			return err
		}
		size, signed, err := auditLog.LatestCheckpoint(tx)
		if errors.Is(err, auditlog.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		p.Checkpoint = signed
		if p.Event.Seq > size {
			return nil
		}
		c, err := auditlog.ParseSigned(signed)
		if err != nil {
			return fmt.Errorf("the latest checkpoint: %w", err)
		}
		hashes, err := auditLog.InclusionProof(tx, size, p.Event.Seq)
		if err != nil {
			return fmt.Errorf("the inclusion proof of event %d cannot be made: %w", p.Event.Seq, err)
		}
		p.Proof = &inclusion{Size: size, Root: c.Root, Hashes: hashes}
		return nil
	})
	return p, err
}

func (l *localSource) Checkpoint(context.Context) (signed []byte, err error) {
	err = l.view(func(tx *kv.Tx) error {
		_, signed, err = auditLog.LatestCheckpoint(tx)
		if errors.Is(err, auditlog.ErrNotFound) {
			return errNoCheckpoint
		}
		return err
	})
	return signed, err
}

func (l *localSource) Checkpoints(context.Context) (all [][]byte, err error) {
	err = l.view(func(tx *kv.Tx) error {
		all, err = auditLog.SignedCheckpoints(tx)
		return err
	})
	return all, err
}

func (l *localSource) Events(context.Context) (auditlog.Stream, error) {
	if err := l.open(); err != nil {
		return nil, err
	}
	return func(yield func(uint64, []byte, []byte) bool) error {
		return l.view(func(tx *kv.Tx) error { return auditLog.Stream(tx)(yield) })
	}, nil
}

func (l *localSource) Export(_ context.Context, from uint64, w io.Writer, vkey string) error {
	return l.view(func(tx *kv.Tx) error {
		size, _, err := auditLog.LatestCheckpoint(tx)
		if errors.Is(err, auditlog.ErrNotFound) {
			return errNoCheckpoint
		}
		if err != nil {
			return err
		}
		if from > size+1 {
			return fmt.Errorf("--from %d is past the latest checkpoint, which signs events 1 to %d; an export ends at a checkpoint", from, size)
		}
		return auditLog.Export(tx, w, from, vkey)
	})
}

func (l *localSource) VerifierKey(context.Context) (string, string, error) {
	b, err := os.ReadFile(l.keyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", errors.New("the daemon's key file is not there (<data>/" + auditKeyFile + ", or --audit-key), so the checkpoints cannot be checked: give the verifier key with --key")
	}
	if err != nil {
		return "", "", fmt.Errorf("cannot read the daemon's key file: %w", pathless(err))
	}
	key, err := verifierLine(b)
	if err != nil {
		return "", "", fmt.Errorf("the daemon's key file %w", err)
	}
	return key, "the daemon's key file", nil
}

// remoteSource reads a running daemon's audit API.
type remoteSource struct {
	base   *url.URL
	token  string
	client *http.Client
}

func newRemote(base *url.URL, token string) *remoteSource {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return &remoteSource{base: base, token: token, client: &http.Client{Transport: t}}
}

func (r *remoteSource) Close() error {
	r.client.CloseIdleConnections()
	return nil
}

// maxAnswer bounds an answer read whole (an export is streamed).
const maxAnswer = 256 << 20

// get sends a GET to the audit API and returns the answer of a 200; any
// other status is an error that says what to do.
func (r *remoteSource) get(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	u := r.base.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s: %w", errUnreachable, r.base.Redacted(), errors.Unwrap(err))
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(b, &env)
	switch code := env.Error.Code; {
	case resp.StatusCode == http.StatusUnauthorized:
		if r.token == "" {
			return nil, errors.New("the daemon wants a token: set WRITERD_TOKEN, or give --token-file, with a token that has the audit scope (writerd token new --scopes audit)")
		}
		return nil, errors.New("the daemon refused the token (401): it is not in its tokens file, or was revoked")
	case resp.StatusCode == http.StatusForbidden && code == "PERMISSION_DENIED":
		return nil, errors.New("the token lacks the audit scope: make one with writerd token new --scopes audit")
	case resp.StatusCode == http.StatusNotFound && code == "":
		return nil, fmt.Errorf("the daemon at %s serves no audit API (404 on %s): is it a writerd serve with audit support?", r.base.Redacted(), u.Path)
	case resp.StatusCode == http.StatusNotFound && path == "/v1/audit/checkpoint", resp.StatusCode == http.StatusNotFound && path == "/v1/audit/export":
		return nil, errNoCheckpoint
	case resp.StatusCode == http.StatusNotFound && code == "NOT_FOUND":
		return nil, errNoEvent
	case code != "":
		return nil, fmt.Errorf("the daemon answered %d %s: %s", resp.StatusCode, code, env.Error.Message)
	}
	return nil, fmt.Errorf("the daemon answered %s", resp.Status)
}

// getJSON decodes a JSON answer into v.
func (r *remoteSource) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	resp, err := r.get(ctx, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(v); err != nil {
		return fmt.Errorf("the daemon's answer to %s is not what the audit API answers: %w", path, err)
	}
	return nil
}

// getText returns a text answer.
func (r *remoteSource) getText(ctx context.Context, path string) ([]byte, error) {
	resp, err := r.get(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}

// pageLimit is the most events the audit API answers in one page.
const pageLimit = 1000

// page is one page of events as the audit API answers it; each event is
// kept as sent, to be made canonical.
type page struct {
	Events []json.RawMessage `json:"events"`
	Next   string            `json:"next"`
}

func (r *remoteSource) List(ctx context.Context, f auditlog.Filter, after uint64, limit int) ([]*auditlog.Event, uint64, error) {
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
	var out []*auditlog.Event
	for {
		n := min(limit-len(out), pageLimit)
		q.Set("limit", strconv.Itoa(n))
		q.Set("after", strconv.FormatUint(after, 10))
		var p page
		if err := r.getJSON(ctx, "/v1/audit/events", q, &p); err != nil {
			return nil, 0, err
		}
		for _, raw := range p.Events {
			e := new(auditlog.Event)
			if err := json.Unmarshal(raw, e); err != nil {
				return nil, 0, fmt.Errorf("the daemon sent an event that is not one: %w", err)
			}
			out = append(out, e)
		}
		if p.Next == "" {
			return out, 0, nil
		}
		next, err := strconv.ParseUint(p.Next, 10, 64)
		if err != nil || next <= after {
			return nil, 0, errors.New("the daemon sent a cursor that does not go forward")
		}
		if len(out) >= limit {
			return out, next, nil
		}
		after = next
	}
}

// Size is the latest checkpoint's size plus the events after it: the API
// has no call for it, and the events after a checkpoint are few.
func (r *remoteSource) Size(ctx context.Context) (uint64, error) {
	size := uint64(0)
	signed, err := r.Checkpoint(ctx)
	switch {
	case err == nil:
		c, err := auditlog.ParseSigned(signed)
		if err != nil {
			return 0, fmt.Errorf("the daemon's latest checkpoint: %w", err)
		}
		size = c.Size
	case !errors.Is(err, errNoCheckpoint):
		return 0, err
	}
	for after := size; ; {
		events, next, err := r.List(ctx, auditlog.Filter{}, after, pageLimit)
		if err != nil {
			return 0, err
		}
		if len(events) > 0 {
			size = events[len(events)-1].Seq
		}
		if next == 0 {
			return size, nil
		}
		after = next
	}
}

func (r *remoteSource) Event(ctx context.Context, ref string) (*provenEvent, error) {
	if _, _, ok := parseRef(ref); !ok {
		return nil, errNoEvent
	}
	// The proof is against the latest checkpoint when the daemon answered;
	// if one was signed between the two requests, ask again.
	for try := 0; ; try++ {
		signed, err := r.Checkpoint(ctx)
		if err != nil && !errors.Is(err, errNoCheckpoint) {
			return nil, err
		}
		var answer struct {
			Event json.RawMessage `json:"event"`
			Proof *inclusion      `json:"proof"`
		}
		if err := r.getJSON(ctx, "/v1/audit/events/"+url.PathEscape(ref), nil, &answer); err != nil {
			return nil, err
		}
		p := &provenEvent{Checkpoint: signed, Proof: answer.Proof, Event: new(auditlog.Event)}
		if err := json.Unmarshal(answer.Event, p.Event); err != nil {
			return nil, fmt.Errorf("the daemon sent an event that is not one: %w", err)
		}
		if p.Canonical, err = canonicalEvent(p.Event); err != nil {
			return nil, err
		}
		size := uint64(0)
		if signed != nil {
			c, err := auditlog.ParseSigned(signed)
			if err != nil {
				return nil, fmt.Errorf("the daemon's latest checkpoint: %w", err)
			}
			size = c.Size
		}
		if p.Proof == nil && p.Event.Seq > size || p.Proof != nil && p.Proof.Size == size || try == 2 {
			return p, nil
		}
	}
}

func (r *remoteSource) Checkpoint(ctx context.Context) ([]byte, error) {
	return r.getText(ctx, "/v1/audit/checkpoint")
}

func (r *remoteSource) Checkpoints(ctx context.Context) ([][]byte, error) {
	var answer struct {
		Checkpoints []string `json:"checkpoints"`
	}
	if err := r.getJSON(ctx, "/v1/audit/checkpoints", nil, &answer); err != nil {
		return nil, err
	}
	all := make([][]byte, len(answer.Checkpoints))
	for i, c := range answer.Checkpoints {
		all[i] = []byte(c)
	}
	return all, nil
}

// Events streams the export from the first event: the events the latest
// checkpoint covers, as the daemon stores them.
func (r *remoteSource) Events(ctx context.Context) (auditlog.Stream, error) {
	resp, err := r.get(ctx, "/v1/audit/export", url.Values{"from": {"1"}})
	if errors.Is(err, errNoCheckpoint) {
		return func(func(uint64, []byte, []byte) bool) error { return nil }, nil
	}
	if err != nil {
		return nil, err
	}
	h, events, err := auditlog.ReadExport(resp.Body)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("the daemon's export: %w", err)
	}
	if h.Prefix.Size != 0 {
		resp.Body.Close()
		return nil, errors.New("the daemon's export does not start at the first event")
	}
	return func(yield func(uint64, []byte, []byte) bool) error {
		defer resp.Body.Close()
		return events(yield)
	}, nil
}

func (r *remoteSource) Export(ctx context.Context, from uint64, w io.Writer, vkey string) error {
	resp, err := r.get(ctx, "/v1/audit/export", url.Values{"from": {strconv.FormatUint(from, 10)}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	h, events, err := auditlog.ReadExport(resp.Body)
	if err != nil {
		return fmt.Errorf("the daemon's export: %w", err)
	}
	if h.Prefix.Size+1 < from {
		return fmt.Errorf("--from %d is past the latest checkpoint, which signs events 1 to %d; an export ends at a checkpoint", from, h.Prefix.Size)
	}
	h.VerifierKey = vkey
	line, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	var werr error
	err = events(func(_ uint64, c []byte, _ []byte) bool {
		_, werr = w.Write(append(bytes.Clone(c), '\n'))
		return werr == nil
	})
	if werr != nil {
		return werr
	}
	return err
}

func (r *remoteSource) VerifierKey(ctx context.Context) (string, string, error) {
	b, err := r.getText(ctx, "/v1/audit/key")
	if err != nil {
		return "", "", err
	}
	return string(bytes.TrimSpace(b)), "the daemon", nil
}
