package upstream

import (
	"net/http"
	"time"
)

// Endpoint is where one upstream is reached, its secrets resolved: what
// the config's block of the upstream becomes once loaded, and what a
// Client connects to. Exactly one of Command and URL is set.
type Endpoint struct {
	Name string // the upstream's name in the config

	// A stdio upstream: the argv writerd starts, its working directory
	// ("" is writerd's), and its whole environment as "NAME=value"
	// (never writerd's own).
	Command []string
	Dir     string
	Env     []string

	// A Streamable HTTP upstream: its URL, the headers sent on each
	// request, a CA bundle to verify it with ("" is the system's), and
	// whether plain http:// is allowed to a host that is not loopback.
	URL       string
	Headers   http.Header
	CAFile    string
	AllowHTTP bool

	// An HTTP API upstream (its tools are endpoints): its base URL, with
	// Headers, CAFile and AllowHTTP as for Streamable HTTP.
	BaseURL string

	// Timeout bounds one call, from its request to its answer.
	Timeout time.Duration
	// MaxResultBytes bounds an answer's result (default 128 KiB).
	MaxResultBytes int

	// Secrets are the values of the references the block's env and
	// headers name, each with its reference ("env:NAME", "file:PATH"),
	// so that a line of the child's stderr is logged with every value
	// replaced by its reference.
	Secrets []Secret
}

// Secret is one secret's value and the reference the config names it by.
type Secret struct {
	Ref   string
	Value string
}

// End is how a call to an upstream ended, as the audit event's
// upstream.end records it.
type End string

const (
	// EndAnswered: a result came back (isError false).
	EndAnswered End = "answered"
	// EndRefused: the upstream refused the call: a result with isError
	// (for a tool whose is_error is "refused"), or the JSON-RPC errors
	// -32601 and -32602.
	EndRefused End = "refused"
	// EndNotSent: the call provably never reached the upstream (the
	// connection was refused, the child is not running, no session).
	EndNotSent End = "not_sent"
	// EndError: another JSON-RPC error: the upstream may have acted.
	EndError End = "error"
	// EndLost: the connection was lost after the request was written.
	EndLost End = "lost"
	// EndTimeout: no answer within the call timeout.
	EndTimeout End = "timeout"
	// EndBadAnswer: an answer arrived that cannot be returned: it breaks
	// the strict parse or the output schema, is too large, holds content
	// other than text, or has isError on a tool whose is_error is
	// "unknown".
	EndBadAnswer End = "bad_answer"
	// EndTakenOver: a takeover found the call's pending record and could
	// not re-drive it: it may or may not have been sent.
	EndTakenOver End = "taken_over"
)
