package auditlog_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness/witnesstest"
)

// trustLog is a log of n events in memory, with its own checkpoints
// signed at every size in sizes, as a store would hand them to Verify.
type trustLog struct {
	*memLog
	cps map[uint64][]byte
}

// buildLog appends n events, changing event edit (from 1; 0: none) as a
// rewrite would, with its tree hashes recomputed, and signs checkpoints at
// sizes with key.
func buildLog(t *testing.T, key *auditlog.Key, n, edit int, sizes ...uint64) *trustLog {
	t.Helper()
	m := &memLog{}
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	for i := range n {
		principal := "agent"
		if i+1 == edit {
			principal = "admin"
		}
		e := &auditlog.Event{Seq: uint64(i + 1), ID: fmt.Sprintf("01JGHJ0QZ5%016d", i), Time: at.Add(time.Duration(i) * time.Second),
			Principal: principal, Transport: "go", Tool: "create_project", IdempotencyKey: fmt.Sprintf("k-%08d", i), Outcome: auditlog.OK}
		c, err := e.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		h, err := tlog.StoredHashes(int64(i), c, m)
		if err != nil {
			t.Fatal(err)
		}
		m.leaves, m.hashes = append(m.leaves, c), append(m.hashes, h...)
	}
	l := &trustLog{memLog: m, cps: map[uint64][]byte{}}
	for _, size := range sizes {
		root, err := tlog.TreeHash(int64(size), m)
		if err != nil {
			t.Fatal(err)
		}
		signed, err := auditlog.Checkpoint{Origin: key.Signer.Name(), Size: size, Root: root}.Sign(key.Signer)
		if err != nil {
			t.Fatal(err)
		}
		l.cps[size] = signed
	}
	return l
}

func (l *trustLog) checkpoints(sizes ...uint64) [][]byte {
	var out [][]byte
	for _, s := range sizes {
		out = append(out, l.cps[s])
	}
	return out
}

func newKey(t *testing.T) *auditlog.Key {
	t.Helper()
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "key"), "writerd/test", true)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// witness is a witness's cosigner (c2sp.org/tlog-cosignature), as
// litewitness signs.
type witness struct {
	signer   *torchwood.CosignatureSigner
	verifier note.Verifier
}

func newWitness(t *testing.T, name string) witness {
	t.Helper()
	s := witnesstest.NewSigner(t, name)
	return witness{s, s.Verifier()}
}

// cosign adds the witnesses' cosignature lines to a signed checkpoint.
func cosign(t *testing.T, signed []byte, ws ...witness) []byte {
	t.Helper()
	text, _, _ := bytes.Cut(signed, []byte("\n\n"))
	out := bytes.Clone(signed)
	for _, w := range ws {
		c, err := note.Sign(&note.Note{Text: string(text) + "\n"}, w.signer)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c[bytes.LastIndex(c, []byte("\n\n"))+2:]...)
	}
	return out
}

// breakLast flips a bit of the last signature of a note, keeping it
// well formed.
func breakLast(t *testing.T, signed []byte) []byte {
	t.Helper()
	lines := bytes.Split(bytes.TrimSuffix(signed, []byte("\n")), []byte("\n"))
	last := lines[len(lines)-1]
	i := bytes.LastIndexByte(last, ' ')
	sig, err := base64.StdEncoding.DecodeString(string(last[i+1:]))
	if err != nil {
		t.Fatal(err)
	}
	sig[len(sig)-1] ^= 1
	lines[len(lines)-1] = append(last[:i+1:i+1], base64.StdEncoding.EncodeToString(sig)...)
	return append(bytes.Join(lines, []byte("\n")), '\n')
}

// Ensure the problem of an edited event never names an event later than
// the first changed, and takes its bounds only from checkpoints the
// auditor trusts: one event edited at 7 in a log of 80 is named exactly
// while the stored leaf checks hold; after a rewrite that recomputed them
// and re-signed the log's own checkpoints, the saved checkpoints at 44
// and 71 bound it to 1..44, and one saved at 5 as well to 6..44.
func TestVerify_BoundsFromTrustedOnly(t *testing.T) {
	key := newKey(t)
	honest := buildLog(t, key, 80, 0, 5, 10, 44, 62, 71, 80)
	rewritten := buildLog(t, key, 80, 7, 10, 20, 30, 40, 50, 62, 70, 80)
	edited := map[int][]byte{6: rewritten.leaves[6]}

	tests := []struct {
		name        string
		stream      auditlog.Stream
		checkpoints [][]byte
		against     [][]byte
		first, last uint64
		kind        string
	}{
		{"leaf checks intact", honest.stream(edited), honest.checkpoints(10, 44, 80), nil, 7, 0, auditlog.ProblemEdited},
		{"leaf checks intact, saved at 44 and 71", honest.stream(edited), honest.checkpoints(10, 44, 80), honest.checkpoints(44, 71), 7, 0, auditlog.ProblemEdited},
		{"rewritten, saved at 44 and 71", rewritten.stream(nil), rewritten.checkpoints(10, 20, 30, 40, 50, 62, 70, 80), honest.checkpoints(44, 71), 1, 44, auditlog.ProblemNotExtension},
		{"rewritten, saved at 71 alone", rewritten.stream(nil), rewritten.checkpoints(62, 70, 80), honest.checkpoints(71), 1, 71, auditlog.ProblemNotExtension},
		{"rewritten, saved at 5, 44 and 71", rewritten.stream(nil), rewritten.checkpoints(10, 62, 80), honest.checkpoints(5, 44, 71), 6, 44, auditlog.ProblemNotExtension},
		{"rewritten, the honest checkpoints left in", rewritten.stream(nil), honest.checkpoints(10, 44, 80), nil, 1, 10, auditlog.ProblemEdited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: tt.checkpoints, Against: tt.against, Events: tt.stream})
			if err != nil {
				t.Fatal(err)
			}
			if v.OK() {
				t.Fatal("the edited log verified")
			}
			p := v.Problems[0]
			if p.Seq != tt.first || p.Last != tt.last || p.Kind != tt.kind {
				t.Fatalf("first problem %+v, want %s at %d..%d", p, tt.kind, tt.first, tt.last)
			}
			for _, p := range v.Problems {
				if p.Seq > 7 {
					t.Errorf("problem %+v names an event after the one changed (7)", p)
				}
			}
		})
	}
	// The untouched log against every saved checkpoint: pinned at the
	// largest.
	v, err := auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: honest.checkpoints(10, 80), Against: honest.checkpoints(44, 71), Events: honest.stream(nil)})
	if err != nil || !v.OK() || v.Pinned != 71 || v.Witnessed != 0 || v.Checkpoints != 2 {
		t.Fatalf("the untouched log: %+v, %v; want it pinned at 71, 2 checkpoints", v, err)
	}
}

// Ensure a quorum of witnesses is counted per witness, a checkpoint with
// it is trusted as a saved one is, and a log whose checkpoints lack it
// fails: a rewrite re-signed with the key carries no cosignature.
func TestVerify_WitnessQuorum(t *testing.T) {
	key := newKey(t)
	a, b, c := newWitness(t, "witness.example/a"), newWitness(t, "witness.example/b"), newWitness(t, "witness.example/c")
	witnesses := []note.Verifier{a.verifier, b.verifier, c.verifier}
	honest := buildLog(t, key, 80, 0, 44, 80)
	cosigned44 := cosign(t, honest.cps[44], a, b)
	twiceByA := cosign(t, honest.cps[80], a, a)

	if got := auditlog.CosignedBy(cosigned44, witnesses); !slices.Equal(got, []bool{true, true, false}) {
		t.Errorf("CosignedBy of a checkpoint cosigned by a and b = %v", got)
	}
	if got := auditlog.CosignedBy(twiceByA, witnesses); !slices.Equal(got, []bool{true, false, false}) {
		t.Errorf("CosignedBy of a checkpoint cosigned twice by a = %v", got)
	}
	broken := breakLast(t, cosigned44) // b's cosignature
	if got := auditlog.CosignedBy(broken, witnesses); !slices.Equal(got, []bool{true, false, false}) {
		t.Errorf("CosignedBy with b's cosignature broken = %v, want a's alone", got)
	}

	v, err := auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: [][]byte{cosigned44, twiceByA}, Witnesses: witnesses, Quorum: 2, Events: honest.stream(nil)})
	if err != nil || !v.OK() || v.Witnessed != 44 || v.Checkpoints != 2 {
		t.Fatalf("the honest log with quorum 2: %+v, %v; want it witnessed at 44", v, err)
	}
	v, err = auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: [][]byte{cosigned44, twiceByA}, Witnesses: witnesses, Quorum: 3, Events: honest.stream(nil)})
	if err != nil || v.OK() || v.Problems[0].Kind != auditlog.ProblemUnwitnessed {
		t.Fatalf("quorum 3 of a log cosigned by 2: %+v, %v; want unwitnessed", v, err)
	}

	// A rewrite re-signed with the key: no checkpoint has the quorum.
	rewritten := buildLog(t, key, 80, 7, 44, 80)
	v, err = auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: rewritten.checkpoints(44, 80), Witnesses: witnesses, Quorum: 2, Events: rewritten.stream(nil)})
	if err != nil || v.OK() || v.Problems[0].Kind != auditlog.ProblemUnwitnessed {
		t.Fatalf("a rewrite re-signed: %+v, %v; want unwitnessed", v, err)
	}
	// A rewrite that kept the witnessed checkpoint: bounded by it, 1..44.
	v, err = auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: [][]byte{cosigned44, rewritten.cps[80]}, Witnesses: witnesses, Quorum: 2, Events: rewritten.stream(nil)})
	if err != nil || v.OK() || v.Problems[0].Seq != 1 || v.Problems[0].Last != 44 {
		t.Fatalf("a rewrite under a witnessed checkpoint: %+v, %v; want a problem at 1..44", v, err)
	}
}

// Ensure a checkpoint the auditor saved (--against) pins the log but is
// no witness's cosignature: with witnesses asked for, a log whose own
// checkpoints carry none is unwitnessed whatever was saved, even a saved
// checkpoint carrying the witnesses' cosignatures; it is never counted
// as Witnessed.
func TestVerify_SavedIsNotWitnessed(t *testing.T) {
	key := newKey(t)
	a, b := newWitness(t, "witness.example/a"), newWitness(t, "witness.example/b")
	witnesses := []note.Verifier{a.verifier, b.verifier}
	honest := buildLog(t, key, 80, 0, 44, 80)
	for name, saved := range map[string][]byte{
		"saved":                   honest.cps[44],
		"saved, cosigned by both": cosign(t, honest.cps[44], a, b),
	} {
		t.Run(name, func(t *testing.T) {
			v, err := auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: honest.checkpoints(44, 80), Against: [][]byte{saved},
				Witnesses: witnesses, Quorum: 2, Events: honest.stream(nil)})
			if err != nil {
				t.Fatal(err)
			}
			if v.Witnessed != 0 || v.Pinned != 44 {
				t.Errorf("witnessed at %d, pinned at %d; want pinned at 44 and witnessed at none", v.Witnessed, v.Pinned)
			}
			if len(v.Problems) != 1 || v.Problems[0].Kind != auditlog.ProblemUnwitnessed {
				t.Fatalf("problems %+v; want the log unwitnessed: a saved checkpoint is not a witness's cosignature", v.Problems)
			}
		})
	}
}
