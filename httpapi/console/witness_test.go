package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/auditlog/witness/witnesstest"
)

// Ensure the Trust page shows each witness the daemon sends to, from the
// cosigner's state, against real litewitnesses: the size each cosigned
// and its lag, a witness down lagging behind, the checkpoints without
// the quorum, and the verify command asking for both witnesses' keys
// and the quorum.
func TestTrust_Witnesses(t *testing.T) {
	w1, w2 := witnesstest.Start(t, "example.com/w1"), witnesstest.Start(t, "example.com/w2")
	var ws []*witness.Witness
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		p, err := witness.Parse(w.Witness())
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, p)
	}
	s := MustServe(t, ws...)
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		w.AddLog(s.D.Key.Signer.Name(), s.D.Key.VerifierKey)
	}
	fill(t, s)
	s.D.Cosigner().Round(context.Background())
	w2.Stop()
	s.Append(event(timeNow(), "bob", "create_record", "key-late"))
	s.Sign()
	s.D.Cosigner().Round(context.Background())

	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	p := b.Get("/ui/")
	mustPage(t, p, http.StatusOK, "trust")
	if strings.Contains(p.Body, `id="no-witnesses"`) || !strings.Contains(p.Body, `<table id="witnesses">`) {
		t.Fatalf("no table#witnesses:\n%s", p.Body)
	}
	for _, want := range []string{
		`<td class="name" title="` + html(w1.VerifierKey) + `">example.com/w1</td>`,
		`<td class="cosigned">9</td>`, `<td class="lag">0 events</td>`,
		`<td class="cosigned">6</td>`, `<td class="lag">3 events</td>`,
		"retrying (",
		`<span id="quorum">2</span>`, `<span id="cosignatures">1</span>`, "short of its quorum",
		"Checkpoints without their quorum since the daemon started: 1 (the latest: 9).",
		"--witness " + html(w1.VerifierKey), "--witness " + html(w2.VerifierKey), "--quorum 2",
	} {
		if !strings.Contains(p.Body, want) {
			t.Errorf("the Trust page has no %s", want)
		}
	}
}
