package console

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/shell"
)

// trustPage is the Trust page.
type trustPage struct {
	base
	// The latest checkpoint; Signed false if none yet.
	Signed         bool
	Size           uint64
	Root           string
	Origin         string
	Through        time.Time // the time of the last event it covers
	Events         uint64    // the log's size
	Unsigned       uint64    // events after it
	SelfCheck      string    // what the daemon's check of its own log found
	SelfCheckOK    bool
	SelfCheckAt    time.Time
	FullCheck      string
	VerifierKey    string
	Witnesses      []witnessRow
	HasWitnesses   bool
	Leads          bool
	Quorum         int
	Cosignatures   int
	Lacking        bool
	WithoutQuorum  uint64
	Recent         []uint64
	VerifyCommands string
}

type witnessRow struct {
	Name, VerifierKey string
	Cosigned          uint64
	At                time.Time
	Lag               uint64
	Failing           string
}

// trust serves the Trust page: whether the log can be trusted, at a
// glance, and how to check it without trusting the daemon.
func (c *Console) trust(w http.ResponseWriter, r *http.Request, s *session) {
	p := trustPage{base: base{Page: "trust", Title: "Trust", Principal: s.principal}, VerifierKey: c.cfg.VerifierKey()}
	ctx := r.Context()
	size, err := c.cfg.Log.Size(ctx)
	if err != nil {
		c.failRead(w, r, s, err)
		return
	}
	p.Events = size
	signed, err := c.cfg.Log.Checkpoint(ctx)
	switch {
	case errors.Is(err, auditlog.ErrNoCheckpoint):
	case err != nil:
		c.failRead(w, r, s, err)
		return
	default:
		cp, err := auditlog.ParseSigned(signed)
		if err != nil {
			c.failRead(w, r, s, fmt.Errorf("the latest checkpoint: %w", err))
			return
		}
		p.Signed, p.Size, p.Origin = true, cp.Size, cp.Origin
		p.Root = base64.StdEncoding.EncodeToString(cp.Root[:])
		if size > cp.Size {
			p.Unsigned = size - cp.Size
		}
		if cp.Size > 0 {
			if events, _, err := c.cfg.Log.List(ctx, auditlog.Filter{}, cp.Size-1, 1); err == nil && len(events) == 1 && events[0].Seq == cp.Size {
				p.Through = events[0].Time
			}
		}
	}
	c.selfCheck(&p)
	var quorum int
	var wkeys []string
	if c.cfg.Witnesses != nil {
		st := c.cfg.Witnesses()
		p.HasWitnesses = len(st.Witnesses) > 0
		p.Leads, p.Quorum, p.Cosignatures, p.Lacking, p.WithoutQuorum, p.Recent = st.Leads, st.Quorum, st.Cosignatures, st.Lacking, st.WithoutQuorum, st.Recent
		for _, ws := range st.Witnesses {
			row := witnessRow{Name: ws.Name, VerifierKey: ws.VerifierKey, Cosigned: ws.Cosigned, At: ws.At, Failing: ws.Failing}
			// The lag behind the latest checkpoint stored, which may be
			// newer than the last round judged.
			if latest := max(st.Latest, p.Size); ws.Cosigned < latest {
				row.Lag = latest - ws.Cosigned
			}
			p.Witnesses = append(p.Witnesses, row)
			wkeys = append(wkeys, ws.VerifierKey)
		}
		quorum = st.Quorum
	}
	p.VerifyCommands = verifyCommands(baseURL(r), p.VerifierKey, wkeys, quorum)
	c.render(w, r, http.StatusOK, "trust", p)
}

// selfCheck says what the daemon's check of its own log found.
func (c *Console) selfCheck(p *trustPage) {
	if c.cfg.Damaged != nil {
		if err := c.cfg.Damaged(); err != nil {
			p.SelfCheck = "FAILED: " + err.Error() + "; the daemon signs no checkpoint and refuses every write (UNAVAILABLE) until it restarts on a repaired log, while reads, the audit API and this console still answer. Run writerd audit verify to list the damage."
			return
		}
	}
	if c.cfg.SelfCheck == nil {
		p.SelfCheck = "This daemon does not check its own log."
		return
	}
	last, full := c.cfg.SelfCheck()
	switch {
	case last.At.IsZero():
		p.SelfCheck = "The daemon has not checked its log yet."
		return
	case last.Damage != nil:
		p.SelfCheck = "FAILED: " + last.Damage.Error() + "; the daemon signs no checkpoint and refuses every write (UNAVAILABLE) until it restarts on a repaired log, while reads, the audit API and this console still answer. Run writerd audit verify to list the damage."
		return
	}
	what := map[string]string{
		auditlog.CheckStart: "at start-up",
		auditlog.CheckSign:  "before signing a checkpoint",
		auditlog.CheckFull:  "in its background pass over the whole log",
	}[last.Kind]
	p.SelfCheckOK, p.SelfCheckAt = true, last.At
	p.SelfCheck = fmt.Sprintf("Verified events 1 to %d %s, %s (%s): no problem found.", last.Size, what, formatTime(last.At), ago(c.cfg.Now(), last.At))
	if full.At.IsZero() {
		p.FullCheck = "The background pass over the whole log has not ended yet since the daemon started (it reads 20,000 events a second, then runs every 6 hours)."
	} else {
		p.FullCheck = fmt.Sprintf("The last background pass read every event, 1 to %d, and their stored hashes, %s (%s): no problem found.", full.Size, formatTime(full.At), ago(c.cfg.Now(), full.At))
	}
}

// verifyCommands are the commands an auditor runs on a machine of their
// own: the export through the audit API (WRITERD_TOKEN holds a token with
// the audit scope), then writerd audit verify on the file with the key
// pinned, and the witnesses' keys and quorum where there are witnesses.
func verifyCommands(server, vkey string, witnesses []string, quorum int) string {
	key := "KEY"
	if vkey != "" {
		key = shell.Quote(vkey)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "export WRITERD_TOKEN=wrd_…   # a token with the audit scope\n")
	fmt.Fprintf(&b, "writerd audit export --server %s -o audit.jsonl\n", shell.Quote(server))
	fmt.Fprintf(&b, "writerd audit verify --export audit.jsonl --key %s", key)
	for _, w := range witnesses {
		fmt.Fprintf(&b, " \\\n\t--witness %s", shell.Quote(w))
	}
	if len(witnesses) > 0 {
		fmt.Fprintf(&b, " --quorum %d", quorum)
	}
	return b.String()
}
