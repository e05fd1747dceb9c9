package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
)

// PathBackup is the route of online backups.
const PathBackup = "/v1/admin/backup"

// Backup writes a consistent copy of the store (Config.Backup): it calls
// begin once with the copy's size in bytes, then writes exactly that many
// to the writer begin returns. An error before begin is answered as the
// error envelope; one after it cuts the answer short.
type Backup func(ctx context.Context, begin func(size int64) (io.Writer, error)) (int64, error)

// backupStall is how long a backup's client may take no bytes before the
// answer is cut off: the store's read transaction is held for as long as
// the copy takes, and a commit that must grow the file waits for it.
const backupStall = 30 * time.Second

// errHead ends the backup of a HEAD request once its headers are set.
var errHead = errors.New("httpapi: HEAD asks for the headers only")

// registerBackup serves GET PathBackup behind Authenticate, if the
// daemon can back up its store.
func (s *server) registerBackup(mux *http.ServeMux) {
	if s.cfg.Backup != nil {
		mux.Handle("GET "+PathBackup, s.cfg.Authenticate(http.HandlerFunc(s.backup)))
	}
}

// backup serves GET /v1/admin/backup to callers with the admin scope: the
// store as one consistent copy, streamed as application/octet-stream
// with its Content-Length known before the first byte (a backup holds
// every record and key, more than the audit scope may read). A failure
// before the copy starts (a store that is not open, or that writerd does
// not back up) is the error envelope; one during it (the client gone, the
// daemon closing) ends the connection short of the Content-Length, which
// every client takes for a cut-off answer.
func (s *server) backup(w http.ResponseWriter, r *http.Request) {
	caller, _ := s.cfg.Caller(r.Context())
	if !caller.Scopes.Has(pipeline.ScopeAdmin) {
		s.fail(w, r, pipeline.Errorf(pipeline.PermissionDenied, "The caller's scopes do not allow backups; it needs a token with the admin scope."))
		return
	}
	// The server's timeouts bound a whole request: its ReadTimeout would
	// cancel the request's context mid-copy, its WriteTimeout cut a large
	// copy off. A backup is bounded by its stalls instead (stallWriter).
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	start := time.Now()
	var out *stallWriter
	n, err := s.cfg.Backup(r.Context(), func(size int64) (io.Writer, error) {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.FormatInt(size, 10))
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Disposition", `attachment; filename="writerd-`+start.UTC().Format("20060102T150405Z")+`.db"`)
		if r.Method == http.MethodHead {
			return nil, errHead
		}
		w.WriteHeader(http.StatusOK)
		out = &stallWriter{w: w, rc: rc}
		return out, nil
	})
	log := s.cfg.Logger.With("request_id", pipeline.RequestID(r.Context()), "principal", caller.Principal)
	switch {
	case errors.Is(err, errHead):
		w.WriteHeader(http.StatusOK)
	case err == nil:
		log.Info("backup sent", "bytes", n, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	case out != nil && out.err != nil:
		// The client's connection failed: its error is logged as a
		// transport error's kind and a fixed description.
		log.Warn("backup cut short", "bytes", n, "kind", mcp.TransportErrorKind(out.err), "description", mcp.TransportError(out.err))
	case out != nil:
		// The status is sent: the connection ends short of the length.
		log.Warn("backup cut short", "bytes", n, "cause", cause(err))
	default:
		e := pipeline.Public(err)
		if e.Code == pipeline.Internal {
			log.Error("backup", "cause", cause(err))
		}
		s.fail(w, r, e)
	}
}

// cause is an error's text for the log, with a pipeline error's private
// cause.
func cause(err error) string {
	var e *pipeline.Error
	if errors.As(err, &e) && e.Err != nil {
		return err.Error() + ": " + e.Err.Error()
	}
	return err.Error()
}

// stallWriter writes a backup to the client, giving each write
// backupStall from now: the server's WriteTimeout bounds a whole answer,
// which a large backup may take longer than, while a client that stops
// reading must not hold the store's read transaction for ever.
type stallWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	err error // the first write's error: the client's connection
}

func (s *stallWriter) Write(p []byte) (int, error) {
	s.rc.SetWriteDeadline(time.Now().Add(backupStall)) // unsupported (a test recorder): the server's timeout stays
	n, err := s.w.Write(p)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}
