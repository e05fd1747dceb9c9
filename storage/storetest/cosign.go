package storetest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// cosigned returns signed with the signature line of a note key of the
// given name added after the lines it has: what a witness's cosignature
// does to a stored checkpoint.
func cosigned(t testing.TB, signed []byte, name string) []byte {
	t.Helper()
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := strings.Cut(string(signed), "\n\n")
	theirs, err := note.Sign(&note.Note{Text: text + "\n"}, s)
	if err != nil {
		t.Fatal(err)
	}
	_, line, _ := strings.Cut(string(theirs), "\n\n")
	return append(bytes.Clone(signed), line...)
}

func testCheckpointReplaced(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	cp := checkpointer(t, e)
	for i := range 5 {
		MustOK(t, e.Call(Caller, "create_project", projectArgs(fmt.Sprintf("key-%08d", i), fmt.Sprintf("p-%d", i))))
		if i == 2 || i == 4 {
			mustSign(t, cp)
		}
	}
	var first [][]byte
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		var err error
		first, err = tx.Audit().Checkpoints()
		return err
	})
	if len(first) != 2 {
		t.Fatalf("%d checkpoints stored, want 2 (sizes 3 and 5)", len(first))
	}
	// The older checkpoint gets one cosignature, then a second; the latest
	// one gets one.
	small := cosigned(t, first[0], "witness.example/a")
	smaller := cosigned(t, small, "witness.example/b")
	latest := cosigned(t, first[1], "witness.example/a")
	e.Update(func(tx pipeline.Tx[handlers.Store]) error {
		if err := tx.Audit().PutCheckpoint(3, small); err != nil {
			return err
		}
		if err := tx.Audit().PutCheckpoint(3, smaller); err != nil {
			return err
		}
		return tx.Audit().PutCheckpoint(5, latest)
	})
	check := func(when string) {
		t.Helper()
		e.View(func(tx pipeline.Tx[handlers.Store]) error {
			cps, err := tx.Audit().Checkpoints()
			if err != nil {
				t.Fatalf("Checkpoints %s: %v", when, err)
			}
			if len(cps) != 2 || !bytes.Equal(cps[0], smaller) || !bytes.Equal(cps[1], latest) {
				t.Fatalf("Checkpoints %s:\n%q\nwant one per size, each the last stored:\n%q", when, cps, [][]byte{smaller, latest})
			}
			size, signed, err := tx.Audit().LatestCheckpoint()
			if err != nil || size != 5 || !bytes.Equal(signed, latest) {
				t.Fatalf("LatestCheckpoint %s = %d, %q, %v; want size 5 with its cosignature", when, size, signed, err)
			}
			// The log's signature still verifies and the tree is the same.
			for i, s := range cps {
				c, err := auditlog.OpenCheckpoint(s, cp.Key.Verifier)
				if err != nil || c.Size != []uint64{3, 5}[i] {
					t.Fatalf("checkpoint %d %s: %+v, %v", i, when, c, err)
				}
			}
			return nil
		})
	}
	check("after the cosignatures were added")
	e.Reopen()
	check("after a reopen")
	if v := verify(t, e, cp.Key); !v.OK() || v.Checkpoints != 2 {
		t.Fatalf("Verify of the cosigned log: %+v, want 2 checkpoints verified", v)
	}
}
