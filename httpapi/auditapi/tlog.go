package auditapi

import (
	"errors"
	"net/http"
	"time"

	"filippo.io/torchwood"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
)

// The log as C2SP tlog-tiles (c2sp.org/tlog-tiles) below pathTlog, for
// generic transparency-log clients, monitors and witnesses: the latest
// signed checkpoint, cosignatures and all, and the tiles of its tree
// (auditlog.ReadTile). A full tile never changes, so caches may keep it
// for ever; a partial one is replaced by wider ones as the log grows, and
// the checkpoint by the next.
const (
	pathTlog           = "/v1/audit/tlog/"
	pathTlogCheckpoint = pathTlog + "checkpoint" // the latest signed checkpoint (text)
	pathTlogTile       = pathTlog + "tile/"      // + <L>/<N>[.p/<W>] or entries/<N>[.p/<W>]: a tile (bytes)
)

// Cache-Control of the tlog answers. Behind a token they are private, so
// that no shared cache in front of the daemon hands the audit log to
// callers without one (a shared cache may keep an answer to a request
// with credentials only if it says public).
const (
	cacheFull    = "max-age=31536000, immutable"
	cachePartial = "max-age=60"
	cacheNone    = "no-store"
)

// registerTlog adds the tlog routes to mux: behind guard and the audit
// scope, as the rest of the protocol, unless TlogPublic serves them to
// anyone (they are read-only, and what a witness or monitor needs).
func (s *Server) registerTlog(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	for pattern, h := range map[string]http.HandlerFunc{
		"GET " + pathTlogCheckpoint:         s.tlogCheckpoint,
		"GET " + pathTlogTile + "{tile...}": s.tlogTile,
	} {
		if s.TlogPublic {
			mux.Handle(pattern, h)
			continue
		}
		mux.Handle(pattern, guard(s.auditScope(h)))
	}
}

// cache writes Cache-Control for an answer kept for maxAge.
func (s *Server) cache(w http.ResponseWriter, maxAge string) {
	scope := "private, "
	if s.TlogPublic {
		scope = "public, "
	}
	if maxAge == cacheNone {
		scope = ""
	}
	w.Header().Set("Cache-Control", scope+maxAge)
}

// tlogCheckpoint serves the latest signed checkpoint as stored: the log's
// signature and the witnesses' cosignatures.
func (s *Server) tlogCheckpoint(w http.ResponseWriter, r *http.Request) {
	s.cache(w, cacheNone)
	var signed []byte
	err := s.Log.View(r.Context(), func(lr auditlog.Reader) error {
		var err error
		_, signed, err = lr.LatestCheckpoint()
		return err
	})
	if errors.Is(err, auditlog.ErrNotFound) {
		err = ErrNoCheckpoint
	}
	if err != nil {
		s.answer(w, r, err)
		return
	}
	writeText(w, signed)
}

// tlogTile serves a hash tile or an entry bundle of the latest
// checkpoint's tree. A path that is not a tile's, a tile that reaches past
// that tree, and any tile while no checkpoint is signed, are NOT_FOUND.
func (s *Server) tlogTile(w http.ResponseWriter, r *http.Request) {
	s.cache(w, cacheNone) // until the tile is found
	t, err := auditlog.ParseTilePath("tile/" + r.PathValue("tile"))
	var data []byte
	if err == nil {
		err = s.Log.View(r.Context(), func(lr auditlog.Reader) error {
			size, _, err := lr.LatestCheckpoint()
			if errors.Is(err, auditlog.ErrNotFound) {
				return auditlog.ErrNoTile
			}
			if err != nil {
				return err
			}
			data, err = auditlog.ReadTile(lr, size, t)
			return err
		})
	}
	switch {
	case errors.Is(err, auditlog.ErrNoTile):
		fail(w, r, pipeline.Errorf(pipeline.NotFound, "The audit log has no such tile: a tile is served once the latest signed checkpoint covers every entry of it (c2sp.org/tlog-tiles paths, such as tile/0/000 or tile/entries/000.p/5)."))
		return
	case err != nil:
		s.answer(w, r, err)
		return
	}
	if auditlog.TileFull(t) {
		s.cache(w, cacheFull)
	} else {
		s.cache(w, cachePartial)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.Write(data)
}

// Tiles returns the daemon's tlog tiles (pathTlog) as a torchwood
// TileFetcher that sends the client's token: what a caller authenticates
// against a checkpoint with tlog.TileHashReader or torchwood's Client.
func (c *Client) Tiles() (*torchwood.TileFetcher, error) {
	hc := &http.Client{Transport: bearer{token: c.token, next: c.client.Transport}, Timeout: 2 * time.Minute}
	return torchwood.NewTileFetcher(c.base.JoinPath(pathTlog).String(),
		torchwood.WithHTTPClient(hc), torchwood.WithUserAgent("writerd"), torchwood.WithConcurrencyLimit(8))
}

// bearer sends a bearer token with every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}
