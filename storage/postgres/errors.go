package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/writerd/writerd/pipeline"
)

// The sentences a call is told when the store fails it: fixed, without
// the server's address, a user, a password or a value.
const (
	// UnreachableMessage: the server does not answer, or refused the
	// connection; the daemon retries.
	UnreachableMessage = "The store, a PostgreSQL database, cannot be reached; writerd keeps trying. Send the call again with the same key in a little while; if this persists, its operator will find why in writerd's log."
	// unavailableMessage: the server failed the write (it restarted, the
	// connection broke, the disk is full); nothing of it is known to be
	// recorded.
	unavailableMessage = "The store failed the call, which may or may not have been recorded; send the call again with the same key later."
	// closedMessage: the store was closed.
	closedMessage = "The store is closed; send the call again with the same key later."
)

// pgError is an error of the server or the driver, with a text that holds
// no value a caller sent, no address, user or password: the SQLSTATE and
// the constraint or table, or the kind of a connection's failure. It
// unwraps to the original error, for errors.Is and errors.As.
type pgError struct {
	text string
	err  error
}

func (e *pgError) Error() string { return e.text }
func (e *pgError) Unwrap() error { return e.err }

// wrapErr names err without what it may hold of the caller's values or
// the server's address, and marks what a client may retry later as
// UNAVAILABLE: a connection lost or refused, the server shutting down or
// out of resources, a conflict the server resolved by aborting.
func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		return err
	}
	// Described even when the call's context ended, which is UNAVAILABLE:
	// the raw text of a *pgconn.ConnectError names the user, the database
	// and the host.
	e := &pgError{text: "postgres: " + what + ": " + describe(err), err: err}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || transient(err) {
		return pipeline.Wrap(pipeline.Unavailable, e, unavailableMessage)
	}
	return e
}

// describe says what went wrong, without values or addresses.
func describe(err error) string {
	var se *stmtError
	var pg *pgconn.PgError
	var ce *pgconn.ConnectError
	switch {
	case errors.As(err, &se):
		return se.Error()
	case errors.As(err, &pg):
		s := "SQLSTATE " + pg.Code
		if pg.ConstraintName != "" {
			s += " on " + pg.ConstraintName
		} else if pg.TableName != "" {
			s += " on " + pg.TableName
		}
		return s
	case errors.As(err, &ce):
		return "cannot connect: " + netKind(ce.Unwrap())
	case errors.Is(err, pgx.ErrNoRows):
		return "no rows"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection was closed"
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return "the connection failed"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return netKind(err)
	}
	if strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "conn busy") {
		return "the connection was closed"
	}
	return fmt.Sprintf("%T", err)
}

// netKind names the kind of a network error.
func netKind(err error) string {
	var ne net.Error
	var pg *pgconn.PgError
	switch {
	case err == nil:
		return "unknown"
	case errors.As(err, &pg):
		return "the server refused: SQLSTATE " + pg.Code
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case strings.Contains(err.Error(), "refused"):
		return "connection refused"
	case strings.Contains(err.Error(), "no such file"):
		return "no server at the socket"
	case strings.Contains(err.Error(), "no such host"):
		return "unknown host"
	case strings.Contains(err.Error(), "password"), strings.Contains(err.Error(), "authentication"):
		return "authentication failed"
	}
	return "network error"
}

// transient reports whether err passes on its own: a connection lost or
// refused, the server shutting down, starting or out of resources, or a
// transaction the server aborted to resolve a conflict.
func transient(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case strings.HasPrefix(pg.Code, "08"), // connection exception
			strings.HasPrefix(pg.Code, "53"),       // insufficient resources: disk full, out of memory, too many connections
			strings.HasPrefix(pg.Code, "57P"),      // operator intervention: shutdown, cannot connect now
			pg.Code == "40001", pg.Code == "40P01", // serialization failure, deadlock
			pg.Code == "55P03", // lock not available (a timeout)
			pg.Code == "25P03": // idle in transaction session timeout
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) || strings.Contains(err.Error(), "conn closed")
}

// isCode reports whether err is the server's error of SQLSTATE code.
func isCode(err error, code string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == code
}
