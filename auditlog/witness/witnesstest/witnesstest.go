// Package witnesstest runs real witnesses for tests: litewitness from
// filippo.io/torchwood v0.9.0, each with an ssh-agent of its own holding
// its Ed25519 key, a SQLite database, and a loopback port.
//
// The binaries (litewitness and witnessctl) are built apart from
// writerd's module (.ci/litewitness) and found in the directory
// WRITERD_LITEWITNESS names, else on PATH. Without them a test that asks
// for a witness skips with one line saying so; with
// WRITERD_TEST_WITNESS_REQUIRED=1 (CI sets it) it fails instead.
//
// It is imported by tests only.
package witnesstest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/torchwood"
)

// NewSigner makes a witness's cosigner (c2sp.org/tlog-cosignature) of a
// new Ed25519 key, as a witness holds one: for tests that cosign
// checkpoints without a litewitness.
func NewSigner(t testing.TB, name string) *torchwood.CosignatureSigner {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := torchwood.NewCosignatureSigner(name, priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// EnvDir names the directory holding litewitness and witnessctl;
// EnvRequired makes their absence a failure.
const (
	EnvDir      = "WRITERD_LITEWITNESS"
	EnvRequired = "WRITERD_TEST_WITNESS_REQUIRED"
)

// Binaries returns the paths of litewitness and witnessctl, or skips the
// test (fails it where they are required).
func Binaries(t testing.TB) (litewitness, witnessctl string) {
	t.Helper()
	find := func(name string) (string, error) {
		if dir := os.Getenv(EnvDir); dir != "" {
			p := filepath.Join(dir, name)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%s is not in %s=%s", name, EnvDir, dir)
			}
			return p, nil
		}
		return exec.LookPath(name)
	}
	lw, err := find("litewitness")
	if err == nil {
		witnessctl, err = find("witnessctl")
	}
	if err != nil {
		msg := "no litewitness and witnessctl (build them with .ci/litewitness and set " + EnvDir + " to their directory): " + err.Error()
		if os.Getenv(EnvRequired) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return lw, witnessctl
}

// Litewitness is a running litewitness.
type Litewitness struct {
	t testing.TB
	// Name is the witness's name, VerifierKey its cosignature/v1 verifier
	// key, URL its base URL (http://127.0.0.1:PORT), DB its database.
	Name, VerifierKey, URL, DB string

	bin, ctl    string
	dir         string // its key, its socket, its log
	sock        string
	fingerprint string
	addr        string
	agent       *exec.Cmd

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *bytes.Buffer
}

// Start starts a litewitness named name (a URL-like name such as
// example.com/w1) on a free loopback port, with a new key and database.
// The test's end stops it and its agent.
func Start(t testing.TB, name string) *Litewitness {
	t.Helper()
	bin, ctl := Binaries(t)
	// The agent's socket path must be short (108 bytes at most), which a
	// test's TempDir may not be.
	dir, err := os.MkdirTemp("", "lw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &Litewitness{t: t, Name: name, bin: bin, ctl: ctl, dir: dir, sock: filepath.Join(dir, "agent.sock"),
		DB: filepath.Join(t.TempDir(), "litewitness.db")}
	w.startAgent()
	key := filepath.Join(dir, "key")
	w.run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "witnesstest", "-f", key)
	w.runEnv([]string{"SSH_AUTH_SOCK=" + w.sock}, "ssh-add", "-q", key)
	fp := strings.Fields(w.run("ssh-keygen", "-l", "-E", "sha256", "-f", key+".pub"))
	if len(fp) < 2 || !strings.HasPrefix(fp[1], "SHA256:") {
		t.Fatalf("ssh-keygen -l printed no SHA256 fingerprint: %q", fp)
	}
	w.fingerprint = fp[1]
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if w.VerifierKey, err = verifierKey(name, pub); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = ln.Addr().String()
	ln.Close()
	w.URL = "http://" + w.addr
	w.Start()
	t.Cleanup(w.Stop)
	return w
}

// verifierKey computes the witness's cosignature/v1 verifier key from
// its OpenSSH public key, as litewitness does (and prints at start-up):
// name+hash+base64(0x04 || key), hash the first 4 bytes of
// SHA-256(name || "\n" || 0x04 || key) (c2sp.org/signed-note).
func verifierKey(name string, pub []byte) (string, error) {
	f := strings.Fields(string(pub))
	if len(f) < 2 || f[0] != "ssh-ed25519" {
		return "", errors.New("witnesstest: not an ssh-ed25519 public key")
	}
	wire, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil || len(wire) != 4+11+4+32 {
		return "", errors.New("witnesstest: malformed ssh-ed25519 public key")
	}
	key := append([]byte{4}, wire[len(wire)-32:]...)
	h := sha256.Sum256(append([]byte(name+"\n"), key...))
	return fmt.Sprintf("%s+%08x+%s", name, binary.BigEndian.Uint32(h[:4]), base64.StdEncoding.EncodeToString(key)), nil
}

func (w *Litewitness) startAgent() {
	w.t.Helper()
	w.agent = exec.Command("ssh-agent", "-D", "-a", w.sock)
	if err := w.agent.Start(); err != nil {
		w.t.Fatalf("start ssh-agent: %v", err)
	}
	w.t.Cleanup(func() { w.agent.Process.Kill(); w.agent.Wait() })
	// The socket's file exists from bind, before the agent listens: a
	// client between the two is refused, so wait for a connection.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", w.sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatal("ssh-agent made no socket within 10s")
		}
	}
}

func (w *Litewitness) run(name string, args ...string) string {
	w.t.Helper()
	return w.runEnv(nil, name, args...)
}

func (w *Litewitness) runEnv(env []string, name string, args ...string) string {
	w.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// Start starts the witness again after Stop, on the same port and
// database, and waits until it answers.
func (w *Litewitness) Start() {
	w.t.Helper()
	w.mu.Lock()
	if w.cmd != nil {
		w.mu.Unlock()
		w.t.Fatal("witnesstest: the witness runs already")
	}
	w.stderr = new(bytes.Buffer)
	cmd := exec.Command(w.bin, "-name", w.Name, "-db", w.DB, "-key", w.fingerprint, "-ssh-agent", w.sock, "-listen", w.addr)
	cmd.Stderr = &lockedWriter{mu: &w.mu, w: w.stderr}
	if err := cmd.Start(); err != nil {
		w.mu.Unlock()
		w.t.Fatalf("start litewitness: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	w.cmd, w.done = cmd, done
	w.mu.Unlock()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(w.URL + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-done:
			w.t.Fatalf("litewitness exited at start:\n%s", w.Log())
		default:
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("litewitness did not answer within 15s:\n%s", w.Log())
		}
	}
	// Its own word for its key, against the one computed: it printed it
	// before it listened.
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(w.Log(), w.VerifierKey); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.t.Fatalf("litewitness does not print the verifier key %s:\n%s", w.VerifierKey, w.Log())
		}
	}
}

// Stop stops the witness (SIGINT, a clean shutdown) and waits for it. It
// may be called more than once.
func (w *Litewitness) Stop() {
	w.mu.Lock()
	cmd, done := w.cmd, w.done
	w.cmd = nil
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// Log returns what the witness logged since it last started.
func (w *Litewitness) Log() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.String()
}

// AddLog makes the witness follow a log: its origin and verifier key (in
// note's text form), as an operator does with witnessctl add-log and
// add-key (which work while the witness runs).
func (w *Litewitness) AddLog(origin, vkey string) {
	w.t.Helper()
	w.run(w.ctl, "add-log", "-db", w.DB, "-origin", origin)
	w.AddKey(origin, vkey)
}

// AddKey adds another verifier key of a log the witness follows.
func (w *Litewitness) AddKey(origin, vkey string) {
	w.t.Helper()
	w.run(w.ctl, "add-key", "-db", w.DB, "-origin", origin, "-key", vkey)
}

// Size returns the size of the tree the witness knows of the log
// (witnessctl list-logs), and false if it does not follow it.
func (w *Litewitness) Size(origin string) (uint64, bool) {
	w.t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(w.run(w.ctl, "list-logs", "-db", w.DB)), "\n") {
		var l struct {
			Origin string `json:"origin"`
			Size   uint64 `json:"size"`
		}
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			w.t.Fatalf("witnessctl list-logs printed %q: %v", line, err)
		}
		if l.Origin == origin {
			return l.Size, true
		}
	}
	return 0, false
}

// Witness is the witness as writerd serve --witness takes it: VKEY@URL.
func (w *Litewitness) Witness() string { return w.VerifierKey + "@" + w.URL }

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
