package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The workload of writerd bench: what each agent writes, and the loop
// that drives the agents and measures them.

// ArgBytes is the size a write's arguments aim at, the key included:
// a small entity as an agent sends it.
const ArgBytes = 380

// benchFiller pads arguments to their size: plain prose, as a description
// or a body holds.
const benchFiller = "Reconcile the supplier invoices of the quarter against purchase orders and goods received notes; " +
	"flag every line whose quantity or unit price differs, and note who approved the exception and when. " +
	"Carry the open items to the next review with their owners, and close the ones settled since the last one. "

// caller is what a target calls: one tool call, as every transport makes
// it. key is the idempotency key ("" for a read), rest the other members
// of the arguments object, without its braces. It returns the tool's
// result when want is set, or the error's code: a catalogue code, or
// TRANSPORT, HTTP_<status> or JSONRPC_<code> for a failure before any.
type caller interface {
	call(ctx context.Context, agent int, tool, key, rest string, want bool) (out []byte, code string)
}

// args writes a call's arguments object as Pipeline.Call and MCP take
// them: the key first.
func args(key, rest string) []byte {
	if key == "" {
		return []byte("{" + rest + "}")
	}
	return []byte(`{"idempotency_key":"` + key + `",` + rest + "}")
}

// codeTransport is the code of a call that failed before any answer.
const codeTransport = "TRANSPORT"

// workload makes each agent's writes of one tool. Names and keys hold a
// run id, so that a run on a store written before, or a daemon's, never
// meets an earlier run's.
type workload struct {
	tool   string
	run    string
	filler int // the filler's length that brings the arguments to ArgBytes

	// Per agent, touched by its goroutine only.
	project  []string // create_record, update_record: the agent's project
	record   []string // update_record: the agent's record
	revision []int64  // update_record: its revision
	bytes    atomic.Int64
	calls    atomic.Int64
}

func newWorkload(tool string, agents int) *workload {
	b := make([]byte, 4)
	rand.Read(b)
	w := &workload{tool: tool, run: hex.EncodeToString(b),
		project: make([]string, agents), record: make([]string, agents), revision: make([]int64, agents)}
	// A sample of the arguments with an empty filler and ids of their
	// length sizes the filler.
	for a := range agents {
		w.project[a], w.record[a], w.revision[a] = strings.Repeat("0", 26), strings.Repeat("0", 26), 1
	}
	w.filler = max(0, ArgBytes-len(args(w.key(0, 0), w.rest(0, 0))))
	return w
}

// key is agent a's key of its write i.
func (w *workload) key(a int, i int64) string {
	return fmt.Sprintf("bench-%s-%04d-%09d", w.run, a, i)
}

// rest is the arguments of agent a's write i, without the key.
func (w *workload) rest(a int, i int64) string {
	text := benchFiller[:min(w.filler, len(benchFiller))]
	switch w.tool {
	case "create_project":
		return fmt.Sprintf(`"name":"bench %s %04d %09d","description":"%s","labels":["bench","load-test"]`, w.run, a, i, text)
	case "create_record":
		return fmt.Sprintf(`"project_id":"%s","title":"Reading %04d-%09d","body":"%s","fields":{"agent":"%04d","seq":"%09d","site":"north-3","ok":true}`,
			w.project[a], a, i, text, a, i)
	case upstreamExport, upstreamTool: // a ticket at the fake upstream, through writerd or directly
		return fmt.Sprintf(`"title":"Bench %s %04d %09d","body":"%s","priority":"normal","labels":["bench","load-test"]`, w.run, a, i, text)
	default: // update_record
		return fmt.Sprintf(`"project_id":"%s","record_id":"%s","expected_revision":%d,"title":"Reading %04d-%09d","body":"%s","fields":{"agent":"%04d","seq":"%09d","site":"north-3","ok":true}`,
			w.project[a], w.record[a], w.revision[a], a, i, text, a, i)
	}
}

// setup makes what agent a's writes need: a project for create_record, a
// project and a record for update_record. Its writes are not measured.
func (w *workload) setup(ctx context.Context, c caller, a int) error {
	if w.tool != "create_record" && w.tool != "update_record" {
		return nil
	}
	var p struct {
		Project struct{ ID string } `json:"project"`
	}
	rest := fmt.Sprintf(`"name":"bench %s %04d","description":"The project of bench agent %d."`, w.run, a, a)
	if err := w.setupCall(ctx, c, a, "create_project", fmt.Sprintf("bench-%s-%04d-project", w.run, a), rest, &p); err != nil {
		return err
	}
	w.project[a] = p.Project.ID
	if w.tool != "update_record" {
		return nil
	}
	var r struct {
		Record struct {
			ID       string
			Revision int64
		} `json:"record"`
	}
	rest = fmt.Sprintf(`"project_id":"%s","title":"The record of bench agent %d"`, w.project[a], a)
	if err := w.setupCall(ctx, c, a, "create_record", fmt.Sprintf("bench-%s-%04d-record", w.run, a), rest, &r); err != nil {
		return err
	}
	w.record[a], w.revision[a] = r.Record.ID, r.Record.Revision
	return nil
}

func (w *workload) setupCall(ctx context.Context, c caller, a int, tool, key, rest string, v any) error {
	out, code := c.call(ctx, a, tool, key, rest, true)
	if code != "" {
		return refusal(tool, code)
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s answered what it never answers: %w", tool, err)
	}
	return nil
}

// refusal says why the first call failed, and what to do about it.
func refusal(tool, code string) error {
	switch code {
	case "UNAUTHENTICATED":
		return errors.New("the daemon refused the token (UNAUTHENTICATED): it is not in its tokens file, or was revoked")
	case "PERMISSION_DENIED":
		return errors.New("the token lacks the write scope (PERMISSION_DENIED): make one with writerd token new --scopes read,write")
	case codeTransport:
		return fmt.Errorf("%s failed before any answer: is the daemon running at --server?", tool)
	}
	return fmt.Errorf("the first %s failed: %s", tool, code)
}

// write sends agent a's write i and returns its code, "" on success.
func (w *workload) write(ctx context.Context, c caller, a int, i int64) string {
	key, rest := w.key(a, i), w.rest(a, i)
	w.bytes.Add(int64(len(args(key, rest))))
	w.calls.Add(1)
	_, code := c.call(ctx, a, w.tool, key, rest, false)
	if w.tool == "update_record" {
		switch code {
		case "":
			w.revision[a]++
		case "REVISION_CONFLICT", codeTransport:
			w.resync(ctx, c, a)
		}
	}
	return code
}

// resync reads the agent's record again after a write whose effect is
// unknown, so that its next update names the revision the record has.
func (w *workload) resync(ctx context.Context, c caller, a int) {
	out, code := c.call(ctx, a, "get_record", "", fmt.Sprintf(`"project_id":"%s","record_id":"%s"`, w.project[a], w.record[a]), true)
	var r struct {
		Record struct{ Revision int64 } `json:"record"`
	}
	if code == "" && json.Unmarshal(out, &r) == nil && r.Record.Revision > 0 {
		w.revision[a] = r.Record.Revision
	}
}

// argBytes is the mean size of the arguments sent, the key included.
func (w *workload) argBytes() int {
	if n := w.calls.Load(); n > 0 {
		return int(math.Round(float64(w.bytes.Load()) / float64(n)))
	}
	return len(args(w.key(0, 0), w.rest(0, 0)))
}

// drive runs agents writers for d and measures them. write is agent a's
// write i; it returns the write's code, "" on success. A write in flight
// when d ends is finished and counted. Only successful writes have their
// latency kept; the others are counted by code.
func drive(ctx context.Context, p *progress, name string, agents int, d time.Duration, write func(a int, i int64) string) (*Result, error) {
	var (
		stop    atomic.Bool
		done    atomic.Int64
		failed  atomic.Int64
		wg      sync.WaitGroup
		lat     = make([][]time.Duration, agents)
		errs    = make([]map[string]int64, agents)
		timer   = time.AfterFunc(d, func() { stop.Store(true) })
		stopped = context.AfterFunc(ctx, func() { stop.Store(true) })
	)
	defer timer.Stop()
	defer stopped()
	start := time.Now()
	ticking := p.start(name, d, start, &done, &failed)
	for a := range agents {
		lat[a] = make([]time.Duration, 0, 1024)
		errs[a] = map[string]int64{}
		wg.Go(func() {
			for i := int64(0); !stop.Load(); i++ {
				t0 := time.Now()
				code := write(a, i)
				dt := time.Since(t0)
				if code == "" {
					lat[a] = append(lat[a], dt)
					done.Add(1)
					continue
				}
				errs[a][code]++
				failed.Add(1)
				if code == codeTransport {
					time.Sleep(10 * time.Millisecond) // no daemon: no spinning
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	ticking()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &Result{Name: name, Seconds: elapsed.Seconds(), Errors: map[string]int64{}}
	all := slices.Concat(lat...)
	slices.Sort(all)
	r.Writes = int64(len(all))
	r.WritesPerSecond = float64(r.Writes) / elapsed.Seconds()
	if len(all) > 0 {
		r.Latency = &Latency{P50: pct(all, 0.50), P90: pct(all, 0.90), P99: pct(all, 0.99), Max: ms(all[len(all)-1])}
	}
	for _, e := range errs {
		for code, n := range e {
			r.Errors[code] += n
		}
	}
	return r, nil
}

// pct is the p-quantile of sorted latencies, nearest rank, in ms.
func pct(sorted []time.Duration, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return ms(sorted[max(0, i)])
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// progress is the line on stderr while a run lasts: rewritten in place on
// a terminal, a line a second otherwise.
type progress struct {
	w   io.Writer
	tty bool
}

// start prints a line every second until the returned func is called.
func (p *progress) start(name string, d time.Duration, start time.Time, done, failed *atomic.Int64) func() {
	quit, over := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(over)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				if p.tty {
					fmt.Fprint(p.w, "\r\x1b[K")
				}
				return
			case <-tick.C:
			}
			el := time.Since(start)
			line := fmt.Sprintf("writerd bench: %s %ds of %s: %s writes, %s/s, %s errors",
				name, int(el.Seconds()), lasting(d), thousands(float64(done.Load())),
				thousands(float64(done.Load())/el.Seconds()), thousands(float64(failed.Load())))
			if p.tty {
				fmt.Fprint(p.w, "\r\x1b[K"+line)
			} else {
				fmt.Fprintln(p.w, line)
			}
		}
	}()
	return func() { close(quit); <-over }
}

// lasting writes a run's length as --duration takes it: 1m, not 1m0s.
// (cmd/writerd formats its flags' defaults alike; bench may not import it.)
func lasting(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// thousands writes a number rounded to a whole one, with thousands
// separated by commas.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(math.Round(f)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
