package witness

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/metrics"
)

// Limits of the protocol and of what is read of a witness's answer.
const (
	// MaxProof is the most consistency proof lines a client may send
	// (c2sp.org/tlog-witness).
	MaxProof = 63
	// MaxAnswer bounds the body of a 200 answer: cosignature lines, about
	// 150 bytes each; a longer answer is refused, unread past the bound.
	MaxAnswer = 8 << 10
	// maxSize bounds a 409 answer, a decimal size and a newline.
	maxSize = 32
	// maxDetail is how much of another answer's body is read, and at most
	// quoted in an error (sanitized, see detail).
	maxDetail   = 512
	shownDetail = 120
	// Timeout bounds one request, answer included.
	Timeout = 10 * time.Second
)

// Witness is one witness the log's checkpoints are sent to.
type Witness struct {
	// Verifier checks the witness's cosignatures (cosignature/v1).
	Verifier *torchwood.CosignatureVerifier
	// url is the witness's base URL. It is never logged nor said back: it
	// may hold credentials.
	url *url.URL
}

// Name is the name of the witness's key, which errors, logs and metrics
// name it by.
func (w *Witness) Name() string { return w.Verifier.Name() }

// VerifierKey is the witness's verifier key in note's text form.
func (w *Witness) VerifierKey() string { return w.Verifier.String() }

// Parse parses a witness given as VKEY@URL: its verifier key in note's
// text form (name+hash+key, as litewitness prints it at start-up), an @,
// and its base URL (http or https). Its errors are sentences that repeat
// nothing of s, which may hold a secret (credentials in the URL).
func Parse(s string) (*Witness, error) {
	// A key's name holds no + and its base64 no @, so the separator is the
	// first @ after the name's + (a name may hold an @; a URL may too).
	plus := strings.IndexByte(s, '+')
	at := -1
	if plus >= 0 {
		if i := strings.IndexByte(s[plus:], '@'); i >= 0 {
			at = plus + i
		}
	}
	if at < 0 {
		return nil, errors.New("a witness is VKEY@URL: its verifier key as litewitness prints it, an @, and its base URL")
	}
	// torchwood reads the key hash's hex in either case and prints it
	// lowercase: take the key only in the form it prints, so that the
	// witness named in events and logs is the one the operator wrote.
	v, err := torchwood.NewCosignatureVerifier(s[:at])
	if err != nil || v.String() != s[:at] {
		return nil, errors.New("the verifier key before the @ is not a witness's cosignature/v1 key (name+hash+key, as litewitness prints it)")
	}
	u, err := url.Parse(s[at+1:])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("the URL after the @ is not a witness's base URL: http:// or https://, a host, and a path if any, without query or fragment")
	}
	return &Witness{Verifier: v, url: u}, nil
}

// Kind is what a witness's answer to add-checkpoint means.
type Kind int

const (
	// Unreachable: no answer (refused, reset, timed out). Retry later.
	Unreachable Kind = iota
	// Conflict (409): the witness knows another size, Error.Known; send
	// again from it.
	Conflict
	// UnknownKey (403): the checkpoint's signature does not verify with
	// any key the witness has for the log (witnessctl add-key).
	UnknownKey
	// UnknownLog (404): the witness does not know the log's origin
	// (witnessctl add-log).
	UnknownLog
	// Fork (422): the consistency proof from the size the witness knows
	// does not verify: it cosigned another tree of this origin.
	Fork
	// BadRequest (400): the witness could not parse the request.
	BadRequest
	// BadAnswer: an answer the protocol does not allow: a cosignature that
	// does not verify with the witness's key, an answer too long, a 409
	// without a size.
	BadAnswer
	// Failed: any other status.
	Failed
)

// Result is the kind's label in writerd_audit_witness_requests_total.
func (k Kind) Result() string {
	return [...]string{metrics.WitnessUnreachable, metrics.WitnessConflict, metrics.WitnessUnknownKey,
		metrics.WitnessUnknownLog, metrics.WitnessFork, metrics.WitnessBadRequest, metrics.WitnessBadAnswer,
		metrics.WitnessError}[k]
}

// Error is a witness's refusal or failure to cosign.
type Error struct {
	Witness string // the name of the witness's key
	Kind    Kind
	Status  int    // the HTTP status, 0 without an answer
	Known   uint64 // Conflict: the size the witness knows
	// Detail is the start of the answer's body, sanitized and bounded,
	// for the operator: what the witness said.
	Detail string
	Err    error // the cause, without the witness's URL
}

func (e *Error) Error() string {
	var s string
	switch e.Kind {
	case Unreachable:
		s = fmt.Sprintf("witness %s cannot be reached", e.Witness)
	case Conflict:
		s = fmt.Sprintf("witness %s knows the log at size %d", e.Witness, e.Known)
	case UnknownKey:
		s = fmt.Sprintf("witness %s does not accept the log's key (403): add it there with witnessctl add-key -origin ORIGIN -key VKEY (writerd audit key prints both)", e.Witness)
	case UnknownLog:
		s = fmt.Sprintf("witness %s does not know this log (404): add it there with witnessctl add-log -origin ORIGIN and witnessctl add-key -origin ORIGIN -key VKEY (writerd audit key prints both)", e.Witness)
	case Fork:
		s = fmt.Sprintf("witness %s refuses the consistency proof (422): it cosigned another tree of this log's origin, a fork, or this log was rewritten", e.Witness)
	case BadRequest:
		s = fmt.Sprintf("witness %s could not parse the request (400)", e.Witness)
	case BadAnswer:
		s = fmt.Sprintf("witness %s answered what the protocol does not allow", e.Witness)
	default:
		s = fmt.Sprintf("witness %s answered status %d", e.Witness, e.Status)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// NewClient returns the HTTP client for witnesses: a timeout on each
// request, and no redirect followed (a witness's endpoint is where it is
// configured; a redirect would carry the request and its credentials
// elsewhere).
func NewClient() *http.Client {
	return &http.Client{
		Timeout:       Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// AddCheckpoint sends the signed checkpoint to the witness with a
// consistency proof from old, the size the witness is believed to know
// (none from 0), and returns the witness's cosignature lines, each
// verified with its key: only the lines of that key are returned. Any
// other outcome is an *Error; Conflict carries the size the witness knows.
func (w *Witness) AddCheckpoint(ctx context.Context, hc *http.Client, old uint64, proof tlog.TreeProof, signed []byte) ([]byte, error) {
	fail := func(k Kind, status int, err error) error {
		return &Error{Witness: w.Name(), Kind: k, Status: status, Err: err}
	}
	if len(proof) > MaxProof {
		return nil, fail(BadRequest, 0, fmt.Errorf("a consistency proof of %d hashes is more than the protocol's %d", len(proof), MaxProof))
	}
	text, _, ok := split(signed)
	if !ok {
		return nil, fail(BadRequest, 0, errors.New("the checkpoint is not a signed note"))
	}
	var body bytes.Buffer
	fmt.Fprintf(&body, "old %d\n", old)
	for _, h := range proof {
		body.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	body.WriteString("\n")
	body.Write(signed)

	u := *w.url
	u.Path = strings.TrimSuffix(u.Path, "/") + "/add-checkpoint"
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body.Bytes()))
	if err != nil {
		return nil, fail(Unreachable, 0, errors.New("the request cannot be made"))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fail(Unreachable, 0, withoutURL(err))
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
		switch {
		case err != nil:
			return nil, fail(Unreachable, resp.StatusCode, fmt.Errorf("the answer was cut: %w", withoutURL(err)))
		case len(b) > MaxAnswer:
			return nil, fail(BadAnswer, resp.StatusCode, fmt.Errorf("its answer is longer than %d bytes", MaxAnswer))
		}
		lines, err := w.verify(text, b)
		if err != nil {
			return nil, fail(BadAnswer, resp.StatusCode, err)
		}
		return lines, nil
	case http.StatusConflict:
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxSize+1))
		if err != nil {
			return nil, fail(Unreachable, resp.StatusCode, fmt.Errorf("the answer was cut: %w", withoutURL(err)))
		}
		known, ok := parseSize(resp.Header.Get("Content-Type"), b)
		if !ok {
			return nil, fail(BadAnswer, resp.StatusCode, errors.New("a 409 answer without its text/x.tlog.size body"))
		}
		return nil, &Error{Witness: w.Name(), Kind: Conflict, Status: resp.StatusCode, Known: known}
	}
	k := Failed
	switch resp.StatusCode {
	case http.StatusForbidden:
		k = UnknownKey
	case http.StatusNotFound:
		k = UnknownLog
	case http.StatusUnprocessableEntity:
		k = Fork
	case http.StatusBadRequest:
		k = BadRequest
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxDetail))
	return nil, &Error{Witness: w.Name(), Kind: k, Status: resp.StatusCode, Detail: detail(b)}
}

// verify checks a 200 answer, the witness's signature lines over text,
// and returns the lines of the witness's key that verify. Lines of other
// keys are dropped; a line of its key that does not verify, or none, is
// refused.
func (w *Witness) verify(text string, answer []byte) ([]byte, error) {
	if len(answer) == 0 {
		return nil, errors.New("its answer holds no cosignature")
	}
	n, err := note.Open([]byte(text+"\n"+string(answer)), note.VerifierList(w.Verifier))
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		return nil, errors.New("its answer holds no cosignature of its key")
	case errors.As(err, &invalid):
		return nil, errors.New("its cosignature does not verify with its key")
	case err != nil:
		return nil, errors.New("its answer is not signature lines")
	}
	var out []byte
	for _, s := range n.Sigs {
		out = append(out, sigLine(s)...)
	}
	return out, nil
}

// parseSize parses a 409 answer: Content-Type text/x.tlog.size and a
// decimal size, then a newline.
func parseSize(contentType string, b []byte) (uint64, bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "text/x.tlog.size" {
		return 0, false
	}
	s, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != s {
		return 0, false
	}
	return n, true
}

// detail returns the start of an answer's body for a log line: printable
// characters only, at most shownDetail of them.
func detail(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(string(b), ""))
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > shownDetail {
		s = string(r[:shownDetail]) + "…"
	}
	return s
}

// withoutURL returns the cause of a failed request without the URL
// net/http wraps it in: a URL may hold credentials.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("no answer within the timeout")
	}
	return err
}
