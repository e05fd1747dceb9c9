package witness_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/auditlog/witness/witnesstest"
)

// The answers no real witness gives, from a witness of the test's own on
// httptest: a server with a real cosignature/v1 key, whose handler each
// test chooses.

type fakeWitness struct {
	t      testing.TB
	signer *torchwood.CosignatureSigner
	vkey   string
	srv    *httptest.Server
	hits   atomic.Int32
	handle func(w http.ResponseWriter, old string, proof []string, signed []byte)
}

func newFake(t testing.TB, name string) *fakeWitness {
	t.Helper()
	s := witnesstest.NewSigner(t, name)
	f := &fakeWitness{t: t, signer: s, vkey: s.Verifier().String()}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/add-checkpoint") {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		head, signed, ok := bytes.Cut(b, []byte("\n\n"))
		if !ok {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		lines := strings.Split(string(head), "\n")
		f.handle(w, lines[0], lines[1:], signed)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// cosign returns the witness's cosignature line over a signed note.
func (f *fakeWitness) cosign(signed []byte) []byte {
	f.t.Helper()
	text, _, _ := bytes.Cut(signed, []byte("\n\n"))
	out, err := note.Sign(&note.Note{Text: string(text) + "\n"}, f.signer)
	if err != nil {
		f.t.Fatal(err)
	}
	_, line, _ := bytes.Cut(out, []byte("\n\n"))
	return line
}

func (f *fakeWitness) witness(t testing.TB) *witness.Witness {
	t.Helper()
	w, err := witness.Parse(f.vkey + "@" + f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// signedCheckpoint is a checkpoint of size signed by key, with any root:
// the fake witness checks no proof.
func signedCheckpoint(t testing.TB, key *auditlog.Key, size uint64) []byte {
	t.Helper()
	b, err := auditlog.Checkpoint{Origin: key.Signer.Name(), Size: size, Root: tlog.RecordHash([]byte("root"))}.Sign(key.Signer)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// corrupt flips a bit of the Ed25519 signature in a cosignature line,
// keeping its key hash and timestamp: a line of the right key that does
// not verify.
func corrupt(t testing.TB, line []byte) []byte {
	t.Helper()
	i := bytes.LastIndexByte(line, ' ')
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(line[i+1:])))
	if err != nil || len(sig) != 4+8+64 {
		t.Fatalf("not a cosignature line: %q", line)
	}
	sig[len(sig)-1] ^= 1
	return append(bytes.Clone(line[:i+1]), base64.StdEncoding.EncodeToString(sig)+"\n"...)
}

func kindOf(err error) (witness.Kind, bool) {
	var e *witness.Error
	if !errors.As(err, &e) {
		return 0, false
	}
	return e.Kind, true
}

// Ensure Parse takes a witness's cosignature key and base URL, and
// refuses anything else with a sentence that repeats nothing of what it
// was given (a URL may hold credentials).
func TestParse(t *testing.T) {
	f := newFake(t, "witness.example/w1")
	at := newFake(t, "ops@witness.example")
	noteKey := func() string {
		_, vkey, err := note.GenerateKey(rand.Reader, "witness.example/w1")
		if err != nil {
			t.Fatal(err)
		}
		return vkey
	}()
	for _, tt := range []struct {
		in, name string
		ok       bool
	}{
		{f.vkey + "@https://witness.example/api", "witness.example/w1", true},
		{f.vkey + "@http://127.0.0.1:7380", "witness.example/w1", true},
		{f.vkey + "@https://user:hunter2secret@witness.example/", "witness.example/w1", true},
		{at.vkey + "@https://witness.example", "ops@witness.example", true}, // an @ in the name
		{f.vkey, "", false},
		{f.vkey + "@", "", false},
		{"@https://witness.example", "", false},
		{f.vkey + "@ftp://hunter2secret.example", "", false},
		{f.vkey + "@https://", "", false},
		{f.vkey + "@https://witness.example/?token=hunter2secret", "", false},
		{f.vkey + "@https://witness.example/#hunter2secret", "", false},
		{f.vkey + "@witness.example/hunter2secret", "", false},
		{noteKey + "@https://witness.example", "", false}, // an Ed25519 note key, not cosignature/v1
		{strings.Replace(f.vkey, "+", "+0", 1) + "@https://witness.example", "", false},
		{"witness.example/w1+aa4a09d1+BOpKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs@https://witness.example", "witness.example/w1", true},
		{"witness.example/w1+AA4A09d1+BOpKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs@https://witness.example", "", false}, // the same key, its hash not as litewitness prints it
		{"hunter2secret", "", false},
		{"", "", false},
	} {
		w, err := witness.Parse(tt.in)
		switch {
		case tt.ok && err != nil:
			t.Errorf("Parse(%q): %v", tt.in, err)
		case tt.ok && w.Name() != tt.name:
			t.Errorf("Parse(%q) names %q, want %q", tt.in, w.Name(), tt.name)
		case !tt.ok && err == nil:
			t.Errorf("Parse(%q) took it", tt.in)
		case !tt.ok && (strings.Contains(err.Error(), "hunter2secret") || strings.Contains(err.Error(), "witness.example")):
			t.Errorf("Parse(%q)'s error repeats its input: %v", tt.in, err)
		}
	}
}

// Ensure the request is the protocol's, and that 63 proof lines are sent
// while 64 are refused before any request.
func TestAddCheckpoint_ProofLinesAtTheLimit(t *testing.T) {
	f := newFake(t, "witness.example/w1")
	key := mustKey(t, "example.com/log")
	signed := signedCheckpoint(t, key, 1000)
	var got []string
	var gotOld string
	var gotNote []byte
	f.handle = func(w http.ResponseWriter, old string, proof []string, s []byte) {
		gotOld, got, gotNote = old, proof, s
		w.Write(f.cosign(s))
	}
	proof := make(tlog.TreeProof, witness.MaxProof)
	for i := range proof {
		proof[i] = tlog.RecordHash([]byte{byte(i)})
	}
	lines, err := f.witness(t).AddCheckpoint(context.Background(), witness.NewClient(), 999, proof, signed)
	if err != nil {
		t.Fatalf("63 proof lines: %v", err)
	}
	if gotOld != "old 999" || len(got) != 63 || got[62] != base64.StdEncoding.EncodeToString(proof[62][:]) || !bytes.Equal(gotNote, signed) {
		t.Fatalf("the witness got %q, %d lines (last %q) and the note %q", gotOld, len(got), got[len(got)-1], gotNote)
	}
	if !bytes.HasPrefix(lines, []byte("— witness.example/w1 ")) || bytes.Count(lines, []byte("\n")) != 1 {
		t.Fatalf("cosignature lines %q", lines)
	}
	hits := f.hits.Load()
	_, err = f.witness(t).AddCheckpoint(context.Background(), witness.NewClient(), 999, append(proof, proof[0]), signed)
	if k, _ := kindOf(err); k != witness.BadRequest || f.hits.Load() != hits {
		t.Fatalf("64 proof lines: %v (kind %v), %d requests; want refused before any request", err, k, f.hits.Load()-hits)
	}
	// From 0: "old 0", no proof line, then the blank line.
	f.handle = func(w http.ResponseWriter, old string, proof []string, s []byte) {
		gotOld, got = old, proof
		w.Write(f.cosign(s))
	}
	if _, err := f.witness(t).AddCheckpoint(context.Background(), witness.NewClient(), 0, nil, signed); err != nil || gotOld != "old 0" || len(got) != 0 {
		t.Fatalf("from 0: %v; the witness got %q and %d proof lines", err, gotOld, len(got))
	}
}

// Ensure a 200 answer is read up to MaxAnswer bytes and no further: one
// of exactly MaxAnswer is taken (only the witness's own line kept), one
// byte more is refused.
func TestAddCheckpoint_AnswerAtTheLimit(t *testing.T) {
	f := newFake(t, "witness.example/w1")
	key := mustKey(t, "example.com/log")
	signed := signedCheckpoint(t, key, 7)
	own := f.cosign(signed)
	// The witness's line, then one of a key the client does not know,
	// its name and signature as long as it takes to make size bytes.
	answer := func(size int) []byte {
		rem := size - len(own) - len("— ") - len(" ") - len("\n")
		sig := (rem - 1) / 4 * 4
		return append(bytes.Clone(own), "— "+strings.Repeat("y", rem-sig)+" "+strings.Repeat("A", sig)+"\n"...)
	}
	for _, tt := range []struct {
		size int
		ok   bool
	}{{witness.MaxAnswer, true}, {witness.MaxAnswer + 1, false}} {
		body := answer(tt.size)
		if len(body) != tt.size {
			t.Fatalf("made an answer of %d bytes, want %d", len(body), tt.size)
		}
		f.handle = func(w http.ResponseWriter, _ string, _ []string, _ []byte) { w.Write(body) }
		lines, err := f.witness(t).AddCheckpoint(context.Background(), witness.NewClient(), 0, nil, signed)
		switch {
		case tt.ok && err != nil:
			t.Fatalf("an answer of %d bytes: %v", tt.size, err)
		case tt.ok && !bytes.Equal(lines, own):
			t.Fatalf("kept %q, want only the witness's own line", lines)
		case !tt.ok:
			if k, _ := kindOf(err); k != witness.BadAnswer || !strings.Contains(err.Error(), "longer than") {
				t.Fatalf("an answer of %d bytes: %v, want refused as too long", tt.size, err)
			}
		}
	}
}

// Ensure a cosignature that does not verify, or is not the witness's, or
// is not a signature line at all, is refused: a witness that answers
// garbage is not kept.
func TestAddCheckpoint_GarbageRefused(t *testing.T) {
	f := newFake(t, "witness.example/w1")
	other := newFake(t, "witness.example/w2")
	key := mustKey(t, "example.com/log")
	signed := signedCheckpoint(t, key, 7)
	good := f.cosign(signed)
	flipped := corrupt(t, good)
	forged := f.cosign(signedCheckpoint(t, key, 8)) // the witness's, over another checkpoint
	for name, body := range map[string][]byte{
		"a flipped bit":           flipped,
		"another checkpoint's":    forged,
		"another witness's":       other.cosign(signed),
		"not signature lines":     []byte("OK\n"),
		"no final newline":        bytes.TrimSuffix(good, []byte("\n")),
		"empty":                   nil,
		"a control character":     append([]byte("\x00"), good...),
		"the good one, then junk": append(bytes.Clone(good), "junk\n"...),
	} {
		f.handle = func(w http.ResponseWriter, _ string, _ []string, _ []byte) { w.Write(body) }
		lines, err := f.witness(t).AddCheckpoint(context.Background(), witness.NewClient(), 0, nil, signed)
		if k, _ := kindOf(err); k != witness.BadAnswer || lines != nil {
			t.Errorf("%s: %q, %v; want refused as a bad answer", name, lines, err)
		} else if strings.Contains(err.Error(), string(body)) && len(body) > 4 {
			t.Errorf("%s: the error repeats the answer: %v", name, err)
		}
	}
}

// Ensure a 409 is read as the protocol says (text/x.tlog.size, a decimal
// size and a newline), and anything else is a bad answer.
func TestAddCheckpoint_Conflict(t *testing.T) {
	f := newFake(t, "witness.example/w1")
	key := mustKey(t, "example.com/log")
	signed := signedCheckpoint(t, key, 7)
	for _, tt := range []struct {
		ctype, body string
		known       uint64
		ok          bool
	}{
		{"text/x.tlog.size", "5\n", 5, true},
		{"text/x.tlog.size; charset=utf-8", "0\n", 0, true},
		{"text/x.tlog.size", "18446744073709551615\n", 1<<64 - 1, true},
		{"text/plain", "5\n", 0, false},
		{"", "5\n", 0, false},
		{"text/x.tlog.size", "5", 0, false},
		{"text/x.tlog.size", "05\n", 0, false},
		{"text/x.tlog.size", "-5\n", 0, false},
		{"text/x.tlog.size", "18446744073709551616\n", 0, false},
		{"text/x.tlog.size", strings.Repeat("1", 40) + "\n", 0, false},
	} {
		f.handle = func(w http.ResponseWriter, _ string, _ []string, _ []byte) {
			if tt.ctype != "" {
				w.Header().Set("Content-Type", tt.ctype)
			}
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, tt.body)
		}
		_, err := f.witness(t).AddCheckpoint(context.Background(), witness.NewClient(), 1, nil, signed)
		var e *witness.Error
		if !errors.As(err, &e) {
			t.Fatalf("%q %q: %v", tt.ctype, tt.body, err)
		}
		switch {
		case tt.ok && (e.Kind != witness.Conflict || e.Known != tt.known):
			t.Errorf("%q %q: %v (kind %v, known %d), want a conflict at %d", tt.ctype, tt.body, err, e.Kind, e.Known, tt.known)
		case !tt.ok && e.Kind != witness.BadAnswer:
			t.Errorf("%q %q: %v (kind %v), want a bad answer", tt.ctype, tt.body, err, e.Kind)
		}
	}
}

// Ensure each status maps to its kind, and that an error names the
// witness by its key's name, never its URL (credentials, a token in the
// path), and quotes at most a short, printable start of the body.
func TestAddCheckpoint_StatusesAndErrors(t *testing.T) {
	f := newFake(t, "witness.example/w1")
	key := mustKey(t, "example.com/log")
	signed := signedCheckpoint(t, key, 7)
	u := strings.Replace(f.srv.URL, "http://", "http://user:hunter2secret@", 1) + "/tok-hunter2secret"
	w, err := witness.Parse(f.vkey + "@" + u)
	if err != nil {
		t.Fatal(err)
	}
	long := "bad \x1b[31mconsistency\x00 proof " + strings.Repeat("é", 10000)
	for status, want := range map[int]witness.Kind{
		http.StatusForbidden: witness.UnknownKey, http.StatusNotFound: witness.UnknownLog,
		http.StatusUnprocessableEntity: witness.Fork, http.StatusBadRequest: witness.BadRequest,
		http.StatusServiceUnavailable: witness.Failed, http.StatusTemporaryRedirect: witness.Failed,
	} {
		f.handle = func(rw http.ResponseWriter, _ string, _ []string, _ []byte) {
			if status == http.StatusTemporaryRedirect {
				rw.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
			}
			rw.WriteHeader(status)
			io.WriteString(rw, long)
		}
		_, err := w.AddCheckpoint(context.Background(), witness.NewClient(), 0, nil, signed)
		var e *witness.Error
		if !errors.As(err, &e) || e.Kind != want || e.Status != status {
			t.Errorf("status %d: %v, want kind %v", status, err, want)
			continue
		}
		if !strings.Contains(err.Error(), "witness.example/w1") || strings.Contains(err.Error(), "hunter2secret") || strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("status %d: %q does not name the witness by its key, or names its URL", status, err)
		}
		if !strings.HasPrefix(e.Detail, "bad [31mconsistency proof") || len([]rune(e.Detail)) > 121 || strings.IndexFunc(e.Detail, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("status %d: detail %q is not a short printable start of the body", status, e.Detail)
		}
	}
	// No answer: a closed port, then a witness slower than the timeout.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	down, err := witness.Parse(f.vkey + "@" + strings.Replace(closed.URL, "http://", "http://user:hunter2secret@", 1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = down.AddCheckpoint(context.Background(), witness.NewClient(), 0, nil, signed)
	if k, _ := kindOf(err); k != witness.Unreachable || strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("a closed port: %v, want unreachable, without the URL's credentials", err)
	}
	f.handle = func(rw http.ResponseWriter, _ string, _ []string, _ []byte) { time.Sleep(300 * time.Millisecond) }
	hc := witness.NewClient()
	hc.Timeout = 50 * time.Millisecond
	start := time.Now()
	_, err = w.AddCheckpoint(context.Background(), hc, 0, nil, signed)
	if k, _ := kindOf(err); k != witness.Unreachable || !strings.Contains(err.Error(), "timeout") || time.Since(start) > 250*time.Millisecond {
		t.Errorf("a slow witness: %v after %v, want unreachable at the timeout", err, time.Since(start))
	}
}

// Ensure the cosigner stores nothing from a witness that answers garbage,
// counts it, and that a witness answering 409 forever costs two requests
// a round (the first, and one resend from the size it said), not a loop.
func TestCosigner_GarbageAndConflictLoop(t *testing.T) {
	key := mustKey(t, "example.com/log")
	l := newLog(t, key)
	l.grow("a", 3)
	garbage, loop := newFake(t, "witness.example/garbage"), newFake(t, "witness.example/loop")
	garbage.handle = func(w http.ResponseWriter, _ string, _ []string, s []byte) {
		w.Write(corrupt(t, garbage.cosign(s)))
	}
	var said atomic.Int64
	loop.handle = func(w http.ResponseWriter, old string, _ []string, _ []byte) {
		w.Header().Set("Content-Type", "text/x.tlog.size")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, "%d\n", said.Add(1)%3) // never the size it was sent from twice
	}
	parsed := []*witness.Witness{garbage.witness(t), loop.witness(t)}
	logs := new(logBuffer)
	c := &witness.Cosigner{Storage: l.storage(), Key: key, Witnesses: parsed, Quorum: 1,
		Logger:     slog.New(slog.NewJSONHandler(logs, nil)),
		RetryFirst: time.Millisecond, RetryMost: time.Millisecond}
	before := l.latest()
	for range 3 {
		c.Round(context.Background())
		time.Sleep(5 * time.Millisecond)
	}
	if after := l.latest(); !bytes.Equal(after, before) {
		t.Fatalf("the stored checkpoint changed:\n%s", after)
	}
	if n := garbage.hits.Load(); n != 3 {
		t.Errorf("the garbage witness got %d requests over 3 rounds, want 3", n)
	}
	if n := loop.hits.Load(); n != 6 {
		t.Errorf("the 409 witness got %d requests over 3 rounds, want 6 (two a round)", n)
	}
	if !strings.Contains(logs.String(), "does not verify with its key") {
		t.Errorf("the garbage answer is not logged as such:\n%s", logs)
	}
}

// Ensure Merge keeps the log's signature first, adds each key once,
// ignores what is not a signature line, and is idempotent.
func TestMerge(t *testing.T) {
	f1, f2 := newFake(t, "witness.example/w1"), newFake(t, "witness.example/w2")
	key := mustKey(t, "example.com/log")
	signed := signedCheckpoint(t, key, 7)
	c1, c2 := f1.cosign(signed), f2.cosign(signed)
	again := f1.cosign(signed) // a second cosignature of w1, another timestamp or not
	m, ok := witness.Merge(signed, append(append(bytes.Clone(c1), "junk\n"...), c2...))
	if !ok || !bytes.Equal(m, append(append(bytes.Clone(signed), c1...), c2...)) {
		t.Fatalf("Merge = %q, %v", m, ok)
	}
	m2, _ := witness.Merge(m, append(bytes.Clone(again), c2...))
	if !bytes.Equal(m2, m) {
		t.Fatalf("merging the same keys again changed the note:\n%s", m2)
	}
	if m3, _ := witness.Merge(m, nil); !bytes.Equal(m3, m) {
		t.Fatal("merging nothing changed the note")
	}
	// The log's own key's line is never added twice either.
	_, own, _ := bytes.Cut(signedCheckpoint(t, key, 7), []byte("\n\n"))
	if m4, _ := witness.Merge(signed, own); !bytes.Equal(m4, signed) {
		t.Fatalf("a second line of the log's key was added:\n%s", m4)
	}
	if _, ok := witness.Merge([]byte("not a note"), c1); ok {
		t.Fatal("Merge took what is not a note")
	}
	got := witness.Cosigners(m, []*witness.Witness{f1.witness(t), f2.witness(t), newFake(t, "witness.example/w3").witness(t)})
	if !got[0] || !got[1] || got[2] {
		t.Fatalf("Cosigners = %v, want w1 and w2", got)
	}
}
