package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// NoBackupMessage answers a backup asked of a store writerd does not back
// up itself (one without pipeline.Backuper: a PostgreSQL database, which
// has its own tools). The client tells it apart from a daemon that serves
// no backups at all.
const NoBackupMessage = "This daemon's store is a PostgreSQL database, which writerd does not back up: back it up with PostgreSQL's own tools (pg_dump, or a base backup with WAL archiving)."

// backupClient waits at most a minute for the daemon's answer to begin;
// the copy itself takes as long as it takes.
var backupClient = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = time.Minute
	return t
}()}

// FetchBackup is the client of the backup route (writerd backup
// --server): it asks the daemon at base for a backup with token (none if
// ""), calls begin with the size the daemon announces (0 if a proxy
// dropped it), and copies the answer to the writer begin returns. It
// returns the bytes copied and, for a copy cut short, the copy's error
// (io.ErrUnexpectedEOF for fewer bytes than announced). A daemon that
// refuses is a sentence saying what to do; a caller that went away is
// ctx's error, before anything was begun.
func FetchBackup(ctx context.Context, base *url.URL, token string, begin func(size int64) (io.Writer, error)) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.JoinPath(PathBackup).String(), nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := backupClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("cannot reach the daemon at %s: %w", base.Redacted(), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, backupRefused(resp, base, token != "")
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/octet-stream" {
		return 0, fmt.Errorf("the daemon at %s answered %s, not a backup: is it a writerd serve?", base.Redacted(), ct)
	}
	size := resp.ContentLength // -1 if a proxy dropped it: the file checks still find a file cut short
	dst, err := begin(max(size, 0))
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(dst, resp.Body)
	switch {
	case err != nil:
		return n, err
	case size >= 0 && n != size:
		return n, io.ErrUnexpectedEOF
	}
	return n, nil
}

// backupRefused is the error of a daemon that answered with an error.
func backupRefused(resp *http.Response, u *url.URL, withToken bool) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	json.Unmarshal(b, &env)
	code, msg := env.Error.Code, env.Error.Message
	switch {
	case resp.StatusCode == http.StatusUnauthorized && !withToken:
		return errors.New("the daemon wants a token: set WRITERD_TOKEN, or give --token-file, with a token that has the admin scope (writerd token new --name backup --scopes admin)")
	case resp.StatusCode == http.StatusUnauthorized:
		return errors.New("the daemon refused the token (401): it is not in its tokens file, or was revoked")
	case resp.StatusCode == http.StatusForbidden && code == "PERMISSION_DENIED" && strings.Contains(msg, "admin scope"):
		return errors.New("the token lacks the admin scope, which backups need: make one with writerd token new --name backup --scopes admin")
	case resp.StatusCode == http.StatusNotFound && msg == NoBackupMessage:
		return errors.New("the daemon's store is a PostgreSQL database, which writerd does not back up: back it up with PostgreSQL's own tools (pg_dump, or a base backup with WAL archiving)")
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("the daemon at %s serves no backups (404 on %s): it is older than this writerd, or not a writerd serve", u.Redacted(), PathBackup)
	case code != "":
		return fmt.Errorf("the daemon answered %d %s: %s", resp.StatusCode, code, msg)
	}
	return fmt.Errorf("the daemon answered %s", resp.Status)
}
