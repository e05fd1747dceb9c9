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
	// RefusedMessage: the server refuses writerd's connections (its
	// password, its role); the daemon retries, and its operator must act.
	RefusedMessage = "The store, a PostgreSQL database, refuses writerd's connection; writerd keeps trying. Send the call again with the same key later; its operator will find why in writerd's log."
)

// RefusedError is the server's refusal of writerd's connection that does
// not pass on its own, as a server that is down does: the password or the
// role refused. Its text is one sentence for the operator, naming the
// SQLSTATE and what to check, without the role, the database, the host or
// a password. Open returns it as it is (a daemon refuses to start on it);
// a store already open answers a call that meets it UNAVAILABLE
// (RefusedMessage) with it as the cause.
type RefusedError struct {
	// Code is the SQLSTATE: 28P01 (invalid_password: a wrong password,
	// or, with password authentication, a role that does not exist) or
	// 28000 (invalid_authorization_specification: the role does not
	// exist, or pg_hba.conf refuses it).
	Code string
	// NoRole is set when the server said the role does not exist.
	NoRole bool
	err    error
}

func (e *RefusedError) Unwrap() error { return e.err }

func (e *RefusedError) Error() string {
	switch {
	case e.NoRole:
		return "the PostgreSQL server has no role of the name writerd connects as (SQLSTATE " + e.Code + "); create it (CREATE ROLE … LOGIN PASSWORD …) or name another in --store"
	case e.Code == "28P01":
		return "the PostgreSQL server refused the password of the role writerd connects as (SQLSTATE 28P01: a wrong password, or no such role); check the password writerd is given (--store-password-file, the connection string, PGPASSWORD or ~/.pgpass)"
	}
	return "the PostgreSQL server refused the role writerd connects as (SQLSTATE " + e.Code + "): no line of its pg_hba.conf lets that role connect to that database from here, or the role may not log in"
}

// refusal returns the server's refusal of a connection in err, or nil.
func refusal(err error) *RefusedError {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return nil
	}
	switch pg.Code {
	case "28P01", "28000":
		// The server's own words, in its default English, are the one sign
		// of a role that does not exist (with password authentication the
		// server says 28P01 for it, on purpose, as for a wrong password).
		noRole := strings.HasPrefix(pg.Message, `role "`) && strings.HasSuffix(pg.Message, `" does not exist`)
		return &RefusedError{Code: pg.Code, NoRole: noRole, err: err}
	}
	return nil
}

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
	if r := refusal(err); r != nil {
		// A store already open whose new connections are refused (a
		// password rotated): the daemon keeps trying.
		return pipeline.Wrap(pipeline.Unavailable, r, RefusedMessage)
	}
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
