package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
)

// exportItself is where the key of an export verified without --key came
// from.
const exportItself = "the export"

// problemKinds are the kinds of problem as the output names them.
var problemKinds = map[string]string{
	auditlog.ProblemEdited:       "edited",
	auditlog.ProblemMissing:      "missing",
	auditlog.ProblemReordered:    "reordered",
	auditlog.ProblemMalformed:    "malformed",
	auditlog.ProblemBadSignature: "bad signature",
	auditlog.ProblemNotExtension: "not an extension",
}

// report prints the problems, the summary line and the notes, and returns
// errProblems if there was a problem.
func (c *auditVerify) report(v *auditlog.Verification, in auditlog.Input, key note.Verifier, size uint64) error {
	if c.output == "json" {
		return c.reportJSON(v, in, key, size)
	}
	w := c.Stdout
	for _, p := range v.Problems {
		kind := problemKinds[p.Kind]
		if kind == "" {
			kind = p.Kind
		}
		where := fmt.Sprintf("event %d", p.Seq)
		switch {
		case p.Kind == auditlog.ProblemUnwitnessed:
			where = "witnesses"
		case p.Seq == 0:
			where = "saved checkpoint"
		case p.Last != 0:
			where = fmt.Sprintf("events %d to %d", p.Seq, p.Last)
		}
		fmt.Fprintf(w, "%s: %s: %s\n", where, kind, p.Detail)
	}
	events := fmt.Sprintf("%d events", v.Events)
	if v.Events == 1 {
		events = "1 event"
	}
	if in.Prefix.Size > 0 {
		events = fmt.Sprintf("events %d to %d", in.Prefix.Size+1, v.Events)
	}
	if !v.OK() {
		first := ""
		if seq := firstProblem(v); seq != 0 {
			first = fmt.Sprintf(", the first at event %d", seq)
		}
		fmt.Fprintf(w, "verification failed: %s%s; %s and %d of %d checkpoints verified\n",
			count(len(v.Problems), "problem"), first, events, v.Checkpoints, len(in.Checkpoints))
		return errProblems
	}
	for _, a := range in.Against {
		if cp, err := auditlog.ParseSigned(a); err == nil {
			fmt.Fprintf(w, "the log extends the saved checkpoint of size %d\n", cp.Size)
		}
	}
	latest := uint64(0)
	for _, s := range in.Checkpoints {
		if cp, err := auditlog.ParseSigned(s); err == nil {
			latest = max(latest, cp.Size)
		}
	}
	switch {
	case len(in.Checkpoints) == 0 && size > 0:
		fmt.Fprintf(w, "no checkpoint has been signed yet: no signature covers events 1 to %d\n", size)
	case size > latest:
		fmt.Fprintf(w, "events %d to %d are after the latest checkpoint (size %d): no signature covers them yet\n", latest+1, size, latest)
	}
	fmt.Fprintf(w, "verified %s against %s; root %s; key %s\n", events, count(v.Checkpoints, "checkpoint"), base64.StdEncoding.EncodeToString(v.Root[:]), auditlog.KeyName(key))
	fmt.Fprintln(w, restsOn(v, in, size))
	return nil
}

// verifyJSON is verify -o json's document; the usage describes its
// members, whose names do not change.
type verifyJSON struct {
	OK               bool            `json:"ok"`
	From             uint64          `json:"from"`
	Events           uint64          `json:"events"`
	Checkpoints      int             `json:"checkpoints"`
	CheckpointsGiven int             `json:"checkpoints_given"`
	Root             string          `json:"root"`
	Key              string          `json:"key"`
	Problems         []problemJSON   `json:"problems"`
	Extends          []uint64        `json:"extends"`
	Unsigned         *eventRangeJSON `json:"unsigned"`
	RestsOn          *restsOnJSON    `json:"rests_on"`
}

type problemJSON struct {
	Kind   string `json:"kind"`
	Seq    uint64 `json:"seq"`
	Last   uint64 `json:"last"`
	Detail string `json:"detail"`
}

type eventRangeJSON struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

type restsOnJSON struct {
	On        string `json:"on"` // key, checkpoint or witnesses
	Size      uint64 `json:"size"`
	Witnesses int    `json:"witnesses"`
	Text      string `json:"text"`
}

// reportJSON prints what report prints as one JSON document, and returns
// errProblems if there was a problem.
func (c *auditVerify) reportJSON(v *auditlog.Verification, in auditlog.Input, key note.Verifier, size uint64) error {
	doc := verifyJSON{
		OK: v.OK(), From: in.Prefix.Size + 1, Events: v.Events, Checkpoints: v.Checkpoints, CheckpointsGiven: len(in.Checkpoints),
		Root: base64.StdEncoding.EncodeToString(v.Root[:]), Key: auditlog.KeyName(key), Problems: []problemJSON{}, Extends: []uint64{},
	}
	for _, p := range v.Problems {
		doc.Problems = append(doc.Problems, problemJSON{Kind: p.Kind, Seq: p.Seq, Last: p.Last, Detail: p.Detail})
	}
	if doc.OK {
		latest := uint64(0)
		for _, s := range in.Checkpoints {
			if cp, err := auditlog.ParseSigned(s); err == nil {
				latest = max(latest, cp.Size)
			}
		}
		for _, a := range in.Against {
			if cp, err := auditlog.ParseSigned(a); err == nil {
				doc.Extends = append(doc.Extends, cp.Size)
			}
		}
		if size > latest {
			doc.Unsigned = &eventRangeJSON{From: latest + 1, To: size}
		}
		r := &restsOnJSON{On: "key", Text: restsOn(v, in, size)}
		switch {
		case v.Witnessed > 0 && v.Witnessed >= v.Pinned:
			r.On, r.Size, r.Witnesses = "witnesses", v.Witnessed, in.Quorum
		case v.Pinned > 0:
			r.On, r.Size = "checkpoint", v.Pinned
		}
		doc.RestsOn = r
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if _, err := c.Stdout.Write(append(b, '\n')); err != nil {
		return err
	}
	if !doc.OK {
		return errProblems
	}
	return nil
}

// restsOn is verify's last line: what its result rests on, and what it
// leaves to the key alone.
func restsOn(v *auditlog.Verification, in auditlog.Input, size uint64) string {
	var s string
	trusted := max(v.Pinned, v.Witnessed)
	switch {
	case v.Witnessed > 0 && v.Witnessed >= v.Pinned:
		witnesses := fmt.Sprintf("%d witnesses", in.Quorum)
		if in.Quorum == 1 {
			witnesses = "1 witness"
		}
		s = fmt.Sprintf("rests on: %s, who cosigned the checkpoint of size %d", witnesses, v.Witnessed)
	case v.Pinned > 0:
		s = fmt.Sprintf("rests on: the checkpoint saved at size %d", v.Pinned)
	default:
		return "rests on: the log's key alone; a holder of the key could have rewritten the log: pin a checkpoint with --against or require witnesses"
	}
	if size > trusted {
		s += fmt.Sprintf("; events %d to %d on the log's key alone", trusted+1, size)
	}
	return s
}

// firstProblem is the smallest sequence number a problem names (a saved
// checkpoint's own problem names none: 0).
func firstProblem(v *auditlog.Verification) uint64 {
	first := v.Problems[0].Seq
	for _, p := range v.Problems {
		if p.Seq != 0 && (first == 0 || p.Seq < first) {
			first = p.Seq
		}
	}
	return first
}

// withContext stops a stream when ctx ends.
func withContext(ctx context.Context, s auditlog.Stream) auditlog.Stream {
	return withProgress(ctx, s, nil)
}

// withProgress counts the events a stream yields on a progress line on w,
// a terminal, at most four times a second, and clears it at the end; it
// stops the stream when ctx ends.
func withProgress(ctx context.Context, s auditlog.Stream, w io.Writer) auditlog.Stream {
	return func(yield func(uint64, []byte, []byte) bool) error {
		var n uint64
		last := time.Now()
		shown := false
		var stopped error
		err := s(func(seq uint64, canonical []byte, leaf []byte) bool {
			n++
			if n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					stopped = err
					return false
				}
				if w != nil && time.Since(last) >= 250*time.Millisecond {
					fmt.Fprintf(w, "\rwriterd audit verify: %d events read", n)
					last, shown = time.Now(), true
				}
			}
			return yield(seq, canonical, leaf)
		})
		if shown {
			fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", 60))
		}
		return errors.Join(err, stopped)
	}
}
