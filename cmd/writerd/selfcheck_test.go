package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/bolttest"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// The daemon's self-check, end to end: a daemon that signed a log refuses
// to start on it, or stops signing, once someone with write access to the
// store changed it beneath writerd; and writerd check says the same.

// checkpointSizes returns the sizes of the checkpoints of a stopped
// daemon's store.
func checkpointSizes(t testing.TB, s testStore) []uint64 {
	t.Helper()
	var sizes []uint64
	withStore(t, s, func(st daemon.Store) error {
		return st.View(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
			cps, err := tx.Audit().Checkpoints()
			for _, c := range cps {
				cp, err := auditlog.ParseSigned(c)
				if err != nil {
					return err
				}
				sizes = append(sizes, cp.Size)
			}
			return err
		})
	})
	return sizes
}

// withStore runs fn on the store of a stopped daemon, open read-only
// meanwhile (waiting a little for the daemon's process to let go of it).
func withStore(t testing.TB, s testStore, fn func(daemon.Store) error) {
	t.Helper()
	var st daemon.Store
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err = daemon.OpenReadOnly(s.config())
		if !errors.Is(err, daemon.ErrHeld) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	defer st.Close()
	if err := fn(st); err != nil {
		t.Fatal(err)
	}
}

// mustRefuseToStart starts serve on s and checks that it exits 1 at once
// with one line: "writerd: " and the sentence want begins with, and no
// checkpoint more.
func mustRefuseToStart(t testing.TB, s testStore, want string) {
	t.Helper()
	before := checkpointSizes(t, s)
	// Over stdio with stdin closed: a daemon that started would exit 0
	// at once, after signing a last checkpoint.
	r := mustRunWith(t, runConfig{env: s.env(t)}, append([]string{"serve", "--stdio"}, s.serveFlags()...)...)
	mustNotFault(t, r.stderr)
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "writerd: "+want) {
		t.Errorf("serve: exit %d, want 1 and one line beginning %q:\n%s", r.code, "writerd: "+want, r.stderr)
	}
	t.Logf("serve: %s", strings.TrimSpace(r.stderr))
	if after := checkpointSizes(t, s); !slices.Equal(after, before) {
		t.Errorf("checkpoints %v after the refusal, want %v", after, before)
	}
}

// mustCheckFinds runs writerd check on s and checks that it exits 1 and
// reports the line want.
func mustCheckFinds(t testing.TB, s testStore, want string) {
	t.Helper()
	r := mustRunWith(t, runConfig{env: s.env(t)}, append([]string{"check"}, s.auditFlags()...)...)
	mustNotFault(t, r.stderr)
	if r.code != 1 || !slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(l string) bool { return strings.HasPrefix(l, want) }) {
		t.Errorf("check: exit %d, want 1 and a line beginning %q\nstdout:\n%s\nstderr:\n%s", r.code, want, r.stdout, r.stderr)
	}
}

// mustLogKey loads the signing key of the log of a stopped daemon's store,
// as its daemon finds it: by origin in the key directory, or on
// PostgreSQL the replicas' file.
func mustLogKey(t testing.TB, s testStore) *auditlog.Key {
	t.Helper()
	path := s.keyFile()
	if s.URL == "" {
		var origin string
		withStore(t, s, func(st daemon.Store) error {
			var err error
			origin, err = daemon.StoreOrigin(context.Background(), st)
			return err
		})
		if origin == "" {
			t.Fatal("the store records no origin")
		}
		path = auditlog.KeyPath(s.keyDir(t), origin)
	}
	key, err := auditlog.LoadKey(path, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// memHashes is a tree's stored hashes, in tlog's numbering.
type memHashes []tlog.Hash

func (m memHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = m[x]
	}
	return out, nil
}

// rewrite does what the holder of the store and of the key can while the
// daemon is down: event seq's JSON changed (old to new), every stored
// hash recomputed to match, every checkpoint signed again with the key.
// The log verifies on its own after it.
func (tp tampering) rewrite(seq uint64, old, new string, key *auditlog.Key) {
	t := tp.t
	t.Helper()
	var leaves [][]byte
	if tp.s.URL != "" {
		size := pgtest.Value[int64](t, tp.s.URL, "SELECT size FROM audit_head")
		for i := int64(1); i <= size; i++ {
			leaves = append(leaves, pgtest.Value[[]byte](t, tp.s.URL, "SELECT canonical FROM audit_events WHERE seq = $1", i))
		}
	} else {
		bolttest.Update(t, tp.s.Dir, func(tx bolttest.Tx) error {
			return tx.Events().ForEach(func(k, v []byte) error {
				n := uint64(len(leaves) + 1)
				leaves = append(leaves, slices.Clone(v[bolttest.JSONStart(n):]))
				return nil
			})
		})
	}
	edited := strings.Replace(string(leaves[seq-1]), old, new, 1)
	if edited == string(leaves[seq-1]) {
		t.Fatalf("event %d holds no %s", seq, old)
	}
	leaves[seq-1] = []byte(edited)
	var hashes memHashes
	stored := make([][]tlog.Hash, len(leaves)) // each event's, as its append stores them
	for i, l := range leaves {
		h, err := tlog.StoredHashes(int64(i), l, hashes)
		if err != nil {
			t.Fatal(err)
		}
		stored[i] = h
		hashes = append(hashes, h...)
	}
	if tp.s.URL != "" {
		for i, l := range leaves {
			pgtest.Exec(t, tp.s.URL, "UPDATE audit_events SET canonical = $2, leaf_check = $3 WHERE seq = $1", i+1, l, stored[i][0][:8])
		}
		for idx, h := range hashes {
			pgtest.Exec(t, tp.s.URL, "INSERT INTO audit_hashes (idx, hash) VALUES ($1, $2) ON CONFLICT (idx) DO UPDATE SET hash = EXCLUDED.hash", idx, h[:])
		}
	} else {
		bolttest.Update(t, tp.s.Dir, func(tx bolttest.Tx) error {
			for i, l := range leaves {
				// The layout bolttest describes: the leaf check, the inner
				// hashes the append completed, the JSON.
				v := slices.Clone(stored[i][0][:8])
				for _, h := range stored[i][1:] {
					v = append(v, h[:]...)
				}
				if err := tx.Events().Put(bolttest.SeqKey(uint64(i+1)), append(v, l...)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, size := range checkpointSizes(t, tp.s) {
		root, err := tlog.TreeHash(int64(size), hashes)
		if err != nil {
			t.Fatal(err)
		}
		signed, err := auditlog.Checkpoint{Origin: key.Signer.Name(), Size: size, Root: root}.Sign(key.Signer)
		if err != nil {
			t.Fatal(err)
		}
		tp.replaceCheckpoint(size, func([]byte) []byte { return signed })
	}
}

// Ensure a daemon refuses to start, with one sentence naming the first bad
// event, on a log changed beneath it after the last checkpoint it signed,
// in the events it then verifies at start-up: one edited, one deleted, two
// swapped; writerd check names the same; no checkpoint is signed.
func TestSelfCheck_RefusesDamageAfterItsLastCheckpoint(t *testing.T) {
	eachStore(t, testSelfCheckRefusesDamageAfterItsLastCheckpoint)
}

func testSelfCheckRefusesDamageAfterItsLastCheckpoint(t *testing.T, kind storeKind) {
	s := mustAuditLog(t, kind.make(t), "one") // events 1-12, the checkpoint of 12 it remembers
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file})
	mustWriteScript(t, d, tok.agent, "two") // events 13-24, no checkpoint yet
	d.cmd.Process.Kill()                    // and none at the stop
	d.Stop()
	if got := checkpointSizes(t, s); !slices.Equal(got, []uint64{12}) {
		t.Fatalf("checkpoints %v, want the one of 12 alone", got)
	}
	for _, tt := range []struct {
		name   string
		damage func(tampering)
		want   string
	}{
		{"one event edited", func(tp tampering) { tp.editEvent(17, `"principal":"agent"`, `"principal":"Agent"`) },
			"the audit log fails its check at event 17: event 17 was changed after it was appended: its bytes no longer hash to its leaf; "},
		{"one event deleted", func(tp tampering) { tp.deleteEvents(17, 17) },
			"the audit log fails its check at event 17: event 17 is missing: the next one stored is 18; "},
		{"two events swapped", func(tp tampering) { tp.swapEvents(15, 17) },
			"the audit log fails its check at event 15: event 15 holds the event of sequence number 17: events were moved; "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCopyStore(t, s) // the same machine: the same record of what it signed
			tt.damage(tampering{t, c})
			mustRefuseToStart(t, c, tt.want)
			mustCheckFinds(t, c, strings.TrimSuffix(tt.want, "; "))
		})
	}
	t.Run("untouched", func(t *testing.T) {
		c := mustCopyStore(t, s)
		if r := mustRunWith(t, runConfig{env: c.env(t)}, append([]string{"check"}, c.auditFlags()...)...); r.code != 0 {
			t.Errorf("check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		// It starts, and signs the events since 12 at the stop.
		r := mustRunWith(t, runConfig{env: c.env(t)}, append([]string{"serve", "--stdio"}, c.serveFlags()...)...)
		if r.code != 0 || !slices.Equal(checkpointSizes(t, c), []uint64{12, 24}) {
			t.Errorf("serve: exit %d, checkpoints %v\n%s", r.code, checkpointSizes(t, c), r.stderr)
		}
	})
}

// checkpointsOf returns the sizes of a running daemon's checkpoints.
func checkpointsOf(t testing.TB, d *httpDaemon, token string) []uint64 {
	t.Helper()
	r := d.Do("GET", "/v1/audit/checkpoints", "", "Authorization", "Bearer "+token)
	var list struct {
		Checkpoints []string `json:"checkpoints"`
	}
	if r.status != 200 || json.Unmarshal([]byte(r.body), &list) != nil {
		t.Fatalf("checkpoints: %d %s", r.status, r.body)
	}
	var sizes []uint64
	for _, s := range list.Checkpoints {
		c, err := auditlog.ParseSigned([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, c.Size)
	}
	return sizes
}

// errorLines returns the daemon's log lines of level ERROR, but the
// calls' own (a refused write's line is its call's).
func errorLines(log string) []string {
	var out []string
	for l := range strings.SplitSeq(log, "\n") {
		if strings.Contains(l, `"level":"ERROR"`) && !strings.Contains(l, `"msg":"call"`) {
			out = append(out, l)
		}
	}
	return out
}

// Ensure damage before the last checkpoint a daemon signed, which its
// start-up check does not read, is found by the background pass: /readyz
// answers 503, one error line names the first bad event and what writerd
// audit verify says of it, and no checkpoint is signed after more writes
// (every write due one), nor at the stop; writerd check names the same.
func TestSelfCheck_BackgroundPassStopsTheSigning(t *testing.T) {
	eachStore(t, testSelfCheckBackgroundPassStopsTheSigning)
}

func testSelfCheckBackgroundPassStopsTheSigning(t *testing.T, kind storeKind) {
	s := mustAuditLog(t, kind.make(t), "one")
	mustAuditLog(t, s, "two") // events 1-24, checkpoints of 12 and 24; it remembers 24
	for _, tt := range []struct {
		name   string
		damage func(tampering)
		seq    int
		verify string
	}{
		{"one event edited", func(tp tampering) { tp.editEvent(7, `"principal":"agent"`, `"principal":"Agent"`) },
			7, "Event 7 was changed after it was appended: its bytes no longer hash to its leaf."},
		{"one event deleted", func(tp tampering) { tp.deleteEvents(7, 7) }, 7, "Event 7 is missing: the next one stored is 8."},
		{"two events swapped", func(tp tampering) { tp.swapEvents(5, 7) }, 5, "Event 5 holds the event of sequence number 7: events were moved."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each on a copy of its own; the sleep below is each one's
			c := mustCopyStore(t, s)
			tt.damage(tampering{t, c})
			tok := mustAuditTokens(t)
			d := MustStartHTTP(t, httpConfig{store: c, tokens: tok.file, damaged: true, args: []string{"--checkpoint-every", "1"}})
			for deadline := time.Now().Add(20 * time.Second); d.Do("GET", "/readyz", "").status != 503; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("/readyz never answered 503:\n%s", d.stderr)
				}
			}
			for i := range 3 { // refused (TestSelfCheck_DamageRefusesWrites)
				mustWrite(t, d, tok.agent, "create_project", fmt.Sprintf("after-key-%d", i), fmt.Sprintf(`{"name":"after-%d"}`, i), "UNAVAILABLE")
			}
			// Nor does one asked for: the answer says why.
			r := d.Do("POST", "/v1/audit/checkpoint", "", "Authorization", "Bearer "+tok.auditor)
			if r.status != 503 || r.errorCode() != "UNAVAILABLE" || !strings.Contains(r.body, "The daemon signs no checkpoint: the audit log fails its check at event "+strconv.Itoa(tt.seq)+": ") {
				t.Errorf("sign now on the damaged log: %d %s", r.status, r.body)
			}
			time.Sleep(1500 * time.Millisecond) // past the checkpointer's poll
			if got := checkpointsOf(t, d, tok.auditor); !slices.Equal(got, []uint64{12, 24}) {
				t.Errorf("checkpoints %v after the writes, want 12 and 24 alone", got)
			}
			if code := d.Stop(); code != 0 {
				t.Errorf("the daemon exited %d", code)
			}
			if got := checkpointSizes(t, c); !slices.Equal(got, []uint64{12, 24}) {
				t.Errorf("checkpoints %v after the stop, want 12 and 24 alone", got)
			}
			lines := errorLines(d.stderr.String())
			t.Logf("the error: %s", strings.Join(lines, "\n"))
			var line struct {
				Msg, Kind, Verify string
				Seq               int
			}
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &line) != nil || line.Seq != tt.seq || line.Verify != tt.verify ||
				!strings.HasPrefix(line.Msg, "the audit log fails its check at event "+strconv.Itoa(tt.seq)+": ") {
				t.Errorf("error lines, want one naming event %d and %q:\n%s", tt.seq, tt.verify, strings.Join(lines, "\n"))
			}
			// /readyz says why, in the log.
			if !strings.Contains(d.stderr.String(), `"msg":"not ready"`) || !strings.Contains(d.stderr.String(), `"cause":"the audit log fails its check at event `+strconv.Itoa(tt.seq)+": ") {
				t.Errorf("no not-ready line with the damage as its cause:\n%s", d.stderr)
			}
			mustCheckFinds(t, c, fmt.Sprintf("the audit log fails its check at event %d: ", tt.seq))
		})
	}
	t.Run("the tail cut behind the last checkpoint", func(t *testing.T) {
		c := mustCopyStore(t, s)
		tampering{t, c}.deleteEvents(22, 24)
		want := "the audit log is not an extension of the checkpoint writerd last signed (size 24): the log ends at event 21, but a checkpoint signs 24 events: events 22 to 24 are missing"
		mustRefuseToStart(t, c, want+"; ")
		mustCheckFinds(t, c, want)
	})
}

// selfCheckRefusal is what a write is told while the daemon's audit log
// fails its self-check.
const selfCheckRefusal = "The audit log failed its self-check, so writerd refuses every write until its operator repairs the log and restarts it; reads and the audit API still answer. Send the call again with the same key once it is repaired."

// readyBody is /readyz's answer: its status, and each check's state.
type readyBody struct {
	Status string `json:"status"`
	Checks map[string]struct {
		State   string `json:"state"`
		Message string `json:"message"`
	} `json:"checks"`
}

// mustReadyBody returns /readyz's status and body.
func mustReadyBody(t testing.TB, d *httpDaemon) (int, readyBody) {
	t.Helper()
	r := d.Do("GET", "/readyz", "")
	var b readyBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatalf("/readyz: %d %s: %v", r.status, r.body, err)
	}
	return r.status, b
}

// Ensure a daemon whose background pass found an event edited before the
// checkpoint it remembers fails closed: every write is refused
// UNAVAILABLE (retry same_key) with a sentence saying why, and records
// nothing (no event, its key unused); reads, the audit API and the
// console still answer, the console's trust page saying why writes are
// refused; /readyz answers 503 naming the failing check.
func TestSelfCheck_DamageRefusesWrites(t *testing.T) {
	eachStore(t, testSelfCheckDamageRefusesWrites)
}

func testSelfCheckDamageRefusesWrites(t *testing.T, kind storeKind) {
	s := mustAuditLog(t, kind.make(t), "one")
	mustAuditLog(t, s, "two") // events 1-24, checkpoints of 12 and 24; it remembers 24
	s = mustCopyStore(t, s)   // the daemons above check theirs at the test's end
	tampering{t, s}.editEvent(7, `"principal":"agent"`, `"principal":"Agent"`)
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file, damaged: true})
	for deadline := time.Now().Add(20 * time.Second); d.Do("GET", "/readyz", "").status != 503; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 503:\n%s", d.stderr)
		}
	}
	status, ready := mustReadyBody(t, d)
	if sc, st := ready.Checks["self_check"], ready.Checks["store"]; status != 503 || ready.Status != "unavailable" ||
		sc.State != "failing" || sc.Message != selfCheckRefusal || st.State != "ok" {
		t.Errorf("/readyz: %d %+v, want 503, the self-check failing with the refusal's sentence and the store ok", status, ready)
	}

	// Writes, over the direct API and MCP, are refused and record nothing.
	r := d.API(tok.agent, "create_project", "after-damage-1", `{"name":"after"}`)
	var e envelope
	json.Unmarshal([]byte(r.body), &e)
	if r.status != 503 || e.Error.Code != "UNAVAILABLE" || e.Error.Retry != "same_key" || e.Error.Message != selfCheckRefusal {
		t.Errorf("a write on the damaged log: %d %s", r.status, r.body)
	}
	res, err := d.MCP(tok.agent).CallTool(context.Background(), &sdk.CallToolParams{Name: "create_project",
		Arguments: map[string]any{"idempotency_key": "after-damage-2", "name": "after-mcp"}})
	if err != nil || !res.IsError || !strings.Contains(text(t, res), selfCheckRefusal) {
		t.Errorf("a write over MCP on the damaged log: %v %+v", err, res)
	}
	for _, key := range []string{"after-damage-1", "after-damage-2"} {
		r := d.API(tok.agent, "get_write_outcome", "", `{"key":"`+key+`"}`)
		if r.status != 200 || !strings.Contains(r.body, `"state":"none"`) {
			t.Errorf("the outcome of a refused write (%s): %d %s, want none", key, r.status, r.body)
		}
	}

	// Reads and the audit API answer.
	if r := d.API(tok.agent, "list_projects", "", `{}`); r.status != 200 || !strings.Contains(r.body, "one-alpha") {
		t.Errorf("a read on the damaged log: %d %s", r.status, r.body)
	}
	if r := d.Do("GET", "/v1/audit/events?limit=100", "", "Authorization", "Bearer "+tok.auditor); r.status != 200 || strings.Count(r.body, `"seq":`) != 24 {
		t.Errorf("the audit API on the damaged log: %d, %d events, want 24\n%s", r.status, strings.Count(r.body, `"seq":`), r.body)
	}
	// The console's trust page says why.
	cookie, _ := consoleSignIn(t, d, tok.auditor)
	if r := consoleGet(t, d.url+"/ui/", cookie); r.status != 200 ||
		!strings.Contains(r.body, "the audit log fails its check at event 7: ") || !strings.Contains(r.body, "refuses every write") {
		t.Errorf("the trust page on the damaged log: %d\n%s", r.status, r.body)
	}
	if code := d.Stop(); code != 0 {
		t.Errorf("the daemon exited %d", code)
	}
	if n := logSize(t, s); n != 24 {
		t.Errorf("the log holds %d events after the refused writes, want 24", n)
	}
}

// Ensure a database rewritten and re-signed with the key while the daemon
// was down (event 7 changed, every hash recomputed, every checkpoint signed
// again), which writerd audit verify passes on its own, is refused at
// start-up: the log is not an extension of the checkpoint the daemon last
// signed, which it kept beside the key; writerd check says so too.
func TestSelfCheck_RefusesALogRewrittenAndReSigned(t *testing.T) {
	eachStore(t, testSelfCheckRefusesALogRewrittenAndReSigned)
}

func testSelfCheckRefusesALogRewrittenAndReSigned(t *testing.T, kind storeKind) {
	s := mustAuditLog(t, kind.make(t), "one")
	mustAuditLog(t, s, "two") // it remembers the checkpoint of 24
	c := mustCopyStore(t, s)
	tampering{t, c}.rewrite(7, `"principal":"agent"`, `"principal":"Agent"`, mustLogKey(t, c))
	r := mustVerifyPasses(t, c.auditFlags()...) // the rewrite fools a verify that trusts the log's key
	if !strings.HasPrefix(r.stdout, "verified 24 events against 2 checkpoints; ") {
		t.Errorf("verify of the rewrite:\n%s", r.stdout)
	}
	want := "the audit log is not an extension of the checkpoint writerd last signed (size 24): "
	mustRefuseToStart(t, c, want)
	mustCheckFinds(t, c, want)
}

// Ensure --checkpoint-every N signs as soon as N events are appended, the
// trees of exactly N, 2N, …: 40 writes one after the other, N 10, give
// checkpoints of 10, 20, 30 and 40, and no other, on each backend.
func TestCheckpointEvery_SignsAtExactSizes(t *testing.T) {
	eachStore(t, testCheckpointEverySignsAtExactSizes)
}

func testCheckpointEverySignsAtExactSizes(t *testing.T, kind storeKind) {
	tok := mustAuditTokens(t)
	s := kind.make(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file, args: []string{"--checkpoint-every", "10", "--checkpoint-interval", "1h"}})
	for i := range 40 {
		mustWrite(t, d, tok.agent, "create_project", fmt.Sprintf("every-key-%02d", i), fmt.Sprintf(`{"name":"every-%02d"}`, i), "")
	}
	mustWaitCheckpoint(t, d, tok.auditor, 40, 10*time.Second)
	if got := checkpointsOf(t, d, tok.auditor); !slices.Equal(got, []uint64{10, 20, 30, 40}) {
		t.Errorf("checkpoints %v, want 10, 20, 30 and 40", got)
	}
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}
	if got := checkpointSizes(t, s); !slices.Equal(got, []uint64{10, 20, 30, 40}) {
		t.Errorf("checkpoints after the stop %v, want 10, 20, 30 and 40: the last adds none", got)
	}
}
