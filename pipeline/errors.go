package pipeline

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
)

// Code is a machine-readable error code from the catalogue of docs/DESIGN.md
// section 3. Clients branch on it; it never changes meaning.
type Code string

// The catalogue. Each code's status, retry hint and whether a failed write
// with it is audited live in the catalogue table below, in one place.
const (
	InvalidInput         Code = "INVALID_INPUT"
	InputTooLarge        Code = "INPUT_TOO_LARGE"
	PermissionDenied     Code = "PERMISSION_DENIED"
	ConfirmationRequired Code = "CONFIRMATION_REQUIRED"
	NotFound             Code = "NOT_FOUND"
	RevisionConflict     Code = "REVISION_CONFLICT"
	AlreadyExists        Code = "ALREADY_EXISTS"
	RecordLocked         Code = "RECORD_LOCKED"
	ProjectNotEmpty      Code = "PROJECT_NOT_EMPTY"
	KeyReused            Code = "IDEMPOTENCY_KEY_REUSED"
	KeyFailed            Code = "IDEMPOTENCY_KEY_FAILED"
	KeyInUse             Code = "IDEMPOTENCY_KEY_IN_USE"
	Unavailable          Code = "UNAVAILABLE"
	Internal             Code = "INTERNAL"
	// UpstreamRefused and UnknownOutcome are the codes of writes outside
	// the store (docs/DESIGN.md section 5b): only the pipeline's external
	// path answers them, each with one audit event.
	UpstreamRefused Code = "UPSTREAM_REFUSED"
	UnknownOutcome  Code = "OUTCOME_UNKNOWN"
	// Unauthenticated is the HTTP transports' own: no token, or one that
	// is not valid. No tool runs.
	Unauthenticated Code = "UNAUTHENTICATED"
)

// Retry tells an agent what it may do after an error.
type Retry string

const (
	// RetrySameKey: the key is not spent; send again with the same key.
	RetrySameKey Retry = "same_key"
	// RetryNewKey: the key is spent or the input must change; fix and send
	// with a new key.
	RetryNewKey Retry = "new_key"
	// RetryNever: retrying will not help.
	RetryNever Retry = "never"
)

// entry is one row of the catalogue.
type entry struct {
	status int
	retry  Retry
	// domain marks the codes a handler may return for a failed write; the
	// pipeline records them as a refusal with one audit event. Any other
	// error from a handler is INTERNAL.
	domain bool
	// external marks the codes of a write outside the store, each
	// recorded with one audit event.
	external bool
}

var catalogue = map[Code]entry{
	InvalidInput:         {http.StatusBadRequest, RetryNewKey, false, false},
	InputTooLarge:        {http.StatusRequestEntityTooLarge, RetryNewKey, false, false},
	PermissionDenied:     {http.StatusForbidden, RetryNever, false, false},
	ConfirmationRequired: {http.StatusPreconditionRequired, RetrySameKey, false, false},
	NotFound:             {http.StatusNotFound, RetryNewKey, true, false},
	RevisionConflict:     {http.StatusConflict, RetryNewKey, true, false},
	AlreadyExists:        {http.StatusConflict, RetryNewKey, true, false},
	RecordLocked:         {http.StatusConflict, RetryNewKey, true, false},
	ProjectNotEmpty:      {http.StatusConflict, RetryNewKey, true, false},
	KeyReused:            {http.StatusUnprocessableEntity, RetryNewKey, false, false},
	KeyFailed:            {http.StatusConflict, RetryNewKey, false, false},
	KeyInUse:             {http.StatusConflict, RetrySameKey, false, false},
	Unavailable:          {http.StatusServiceUnavailable, RetrySameKey, false, false},
	Internal:             {http.StatusInternalServerError, RetrySameKey, false, false},
	Unauthenticated:      {http.StatusUnauthorized, RetryNever, false, false},
	UpstreamRefused:      {http.StatusUnprocessableEntity, RetryNewKey, false, true},
	UnknownOutcome:       {http.StatusBadGateway, RetryNever, false, true},
}

// Codes returns every code of the catalogue, sorted.
func Codes() []Code {
	return slices.Sorted(maps.Keys(catalogue))
}

// AuditedCodes returns, sorted, the codes a failed write's audit event
// can carry: the domain codes a handler refuses a write with, those of a
// write outside the store, and INTERNAL. The others refuse a call before
// its write runs (or, for UNAVAILABLE, record nothing), so no audit
// event carries them.
func AuditedCodes() []Code {
	var codes []Code
	for c, e := range catalogue {
		if e.domain || e.external || c == Internal {
			codes = append(codes, c)
		}
	}
	slices.Sort(codes)
	return codes
}

// Status returns the HTTP status of a code; an unknown code is a 500.
func (c Code) Status() int {
	if e, ok := catalogue[c]; ok {
		return e.status
	}
	return http.StatusInternalServerError
}

// InternalMessage is the only text a client ever sees for an unexpected
// error or a panic.
const InternalMessage = "Internal error."

// Error is the one error type of writerd. It has two faces: Code, Message
// and Retry are public and reach the client; Err is the private cause, for
// logs only. Error() returns the public sentence alone, so that no fmt call,
// SDK or log line that prints the error can leak the cause by accident.
type Error struct {
	Code    Code
	Message string // a sentence for the agent; never a value it supplied
	Retry   Retry
	// Preview is set on CONFIRMATION_REQUIRED: what the confirmed call
	// would do.
	Preview any
	// Detail is public, structured data about a fault, rendered as the
	// envelope's "detail": what a handler can truthfully add to an
	// INTERNAL or UNAVAILABLE whose message is fixed (delete_records: that
	// nothing was deleted, and where it stopped). It must hold nothing
	// private. Public drops it from every other code.
	Detail any
	// Err is the private cause, for logs only.
	Err error

	rule string // the rule a rejected input broke, for metrics; bounded
}

// Errorf returns an *Error with the catalogue's retry hint for code. The
// format must not interpolate a value the caller supplied.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retry: catalogue[code].retry}
}

// Wrap returns an *Error whose private cause is err.
func Wrap(code Code, err error, message string) *Error {
	return &Error{Code: code, Message: message, Retry: catalogue[code].retry, Err: err}
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Status is the HTTP status of the error's code.
func (e *Error) Status() int { return e.Code.Status() }

// Public turns any error into one a client may see. An *Error in the chain
// is returned as it is (without its Detail unless it is INTERNAL or
// UNAVAILABLE); anything else is INTERNAL with the fixed message and the
// original kept as the private cause.
func Public(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if _, ok := catalogue[e.Code]; ok && (e.Code != Internal || e.Message == InternalMessage) {
			if e.Detail != nil && e.Code != Internal && e.Code != Unavailable {
				kept := *e
				kept.Detail = nil
				return &kept
			}
			return e
		}
	}
	return &Error{Code: Internal, Message: InternalMessage, Retry: RetrySameKey, Err: err}
}

// ErrorCode returns the code of err as a client would see it.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	return Public(err).Code
}

// envelope is the wire shape of an error, docs/DESIGN.md section 3.
type envelope struct {
	Error envelopeBody `json:"error"`
}

type envelopeBody struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Status    int    `json:"status"`
	Retry     Retry  `json:"retry"`
	RequestID string `json:"request_id"`
	Preview   any    `json:"preview,omitempty"`
	Detail    any    `json:"detail,omitempty"`
}

// ErrCancelled is in the chain of the error of a write whose caller went
// away (its context ended) before the write ran: Cancelled makes it.
var ErrCancelled = errors.New("pipeline: the caller went away before the write ran")

// cancelledMessage is what a call is told whose context ended before its
// write ran.
const cancelledMessage = "The call was cancelled before it ran, and nothing of it was recorded; send it again with the same key."

// Cancelled is the answer to a write whose caller went away before it
// ran (cause is the context's error): UNAVAILABLE with retry same_key,
// nothing run and nothing recorded, the key unused. The key's lock wait
// and the store's group commit answer it; a write that has begun to run
// is never answered it, since it completes whatever its caller does.
func Cancelled(cause error) *Error {
	return Wrap(Unavailable, fmt.Errorf("%w: %w", ErrCancelled, cause), cancelledMessage)
}
