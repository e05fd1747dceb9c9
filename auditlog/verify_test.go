package auditlog_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// memLog is a log kept in memory, as a store of any backend would hand it
// to Verify: the events' canonical bytes and the tree tlog builds of them.
type memLog struct {
	leaves [][]byte
	hashes []tlog.Hash
}

func (m *memLog) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = m.hashes[x]
	}
	return out, nil
}

// mustLog appends n events to a memory log and signs a checkpoint of it
// with a new key.
func mustLog(t *testing.T, n int) (*memLog, *auditlog.Key, []byte) {
	t.Helper()
	key := newKey(t)
	l := buildLog(t, key, n, 0, uint64(n))
	return l.memLog, key, l.cps[uint64(n)]
}

// stream yields the memory log's events, with leaves[i] replaced where
// edits says, each with the start of the leaf hash its append stored.
func (m *memLog) stream(edits map[int][]byte) auditlog.Stream {
	return func(yield func(seq uint64, canonical []byte, leafCheck []byte) bool) error {
		for i, c := range m.leaves {
			if e, ok := edits[i]; ok {
				c = e
			}
			if !yield(uint64(i+1), c, m.hashes[tlog.StoredHashIndex(0, int64(i))][:8]) {
				return nil
			}
		}
		return nil
	}
}

// Ensure Verify needs no store: a log held in memory, as any backend's
// events would stream, verifies against its signed checkpoint, and an
// event edited after signing is named by its sequence number.
func TestVerify_NeedsNoStore(t *testing.T) {
	m, key, signed := mustLog(t, 13)
	v, err := auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: [][]byte{signed}, Events: m.stream(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || v.Events != 13 || v.Checkpoints != 1 {
		t.Fatalf("verification %+v, want 13 events and the checkpoint verified", v)
	}
	edited := bytes.Replace(m.leaves[6], []byte(`"agent"`), []byte(`"admin"`), 1)
	v, err = auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: [][]byte{signed}, Events: m.stream(map[int][]byte{6: edited})})
	if err != nil {
		t.Fatal(err)
	}
	if v.OK() || v.Problems[0].Seq != 7 {
		t.Fatalf("problems %+v, want the edit named at event 7", v.Problems)
	}
}

// Ensure an export read back with ReadExport verifies offline: a header
// line and one line per event, each its canonical JSON.
func TestReadExport_Verifies(t *testing.T) {
	m, key, signed := mustLog(t, 5)
	header, err := json.Marshal(auditlog.ExportHeader{Version: auditlog.ExportVersion, VerifierKey: key.VerifierKey, Checkpoint: string(signed)})
	if err != nil {
		t.Fatal(err)
	}
	var export bytes.Buffer
	export.Write(append(header, '\n'))
	for _, c := range m.leaves {
		export.Write(append(c, '\n'))
	}
	h, events, err := auditlog.ReadExport(&export)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := auditlog.ParseVerifierKey(h.VerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auditlog.Verify(auditlog.Input{Key: verifier, Checkpoints: [][]byte{[]byte(h.Checkpoint)}, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK() || v.Events != 5 {
		t.Fatalf("verification %+v, want the 5 events verified", v)
	}
}
