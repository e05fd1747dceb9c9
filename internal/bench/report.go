package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is what writerd bench prints: as a table (WriteTable), or as
// JSON with -o json (WriteJSON), in this shape.
type Report struct {
	Tool   string `json:"tool"`
	Target string `json:"target"`
	// Client is the MCP client of --target mcp: "bench" or "sdk".
	Client   string  `json:"client,omitempty"`
	Agents   int     `json:"agents"`
	Duration float64 `json:"duration_seconds"`
	// ArgBytes is the mean size of a write's arguments, the key included.
	ArgBytes int `json:"argument_bytes"`
	// Store is where writerd wrote: "fresh" (a new data directory),
	// "fresh postgres" (a scratch database), "given" (--data), "daemon",
	// or "N replicas".
	Store string `json:"store"`
	// StoreBytes is the size of the store's file before the run, in
	// process.
	StoreBytes int64     `json:"store_bytes_before,omitempty"`
	Writerd    *Result   `json:"writerd"`
	Baselines  []*Result `json:"baselines,omitempty"`
	// Upstream is --target upstream's comparison.
	Upstream *UpstreamFigures `json:"upstream,omitempty"`
}

// Result is one run: writerd's, or a baseline's.
type Result struct {
	Name            string           `json:"name"`
	Writes          int64            `json:"writes"`
	Seconds         float64          `json:"seconds"`
	WritesPerSecond float64          `json:"writes_per_second"`
	Latency         *Latency         `json:"latency_ms"`
	Errors          map[string]int64 `json:"errors"`
	// Commits are the write transactions committed, each fsynced.
	Commits          int64   `json:"commits"`
	CommitsPerSecond float64 `json:"commits_per_second"`
	WritesPerCommit  float64 `json:"writes_per_commit"`
	// CommitMillis is the mean time of a commit: the writes run in its
	// transaction and the fsync (writerd's group commit only).
	CommitMillis float64 `json:"commit_ms,omitempty"`
	// TransactionsPerWrite is the write transactions committed per write
	// counted (writerd's group commit only): 1 for a built-in write, 2 for
	// a write to an upstream (its pending record, its completion), more
	// with the collector's and the checkpointer's.
	TransactionsPerWrite float64 `json:"transactions_per_write,omitempty"`
	CPU                  *CPU    `json:"cpu,omitempty"`
	Heap                 *Memory `json:"heap_inuse_bytes,omitempty"`
	RSS                  *Memory `json:"resident_bytes,omitempty"` // a daemon's
	Disk                 *Disk   `json:"disk,omitempty"`
	// Ratio is writerd's against this run (on a baseline only).
	Ratio *Ratio `json:"writerd_ratio,omitempty"`
}

// Latency is a run's latency of successful writes, in milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// CPU is the CPU time a run used: this process's (user and system),
// and a daemon's from its process_cpu_seconds_total.
type CPU struct {
	Seconds              float64  `json:"seconds"`
	PerWriteMicros       float64  `json:"us_per_write"`
	Server               *float64 `json:"server_seconds,omitempty"`
	ServerPerWriteMicros *float64 `json:"server_us_per_write,omitempty"`
}

// Memory is a size sampled during a run: at its end, and the largest seen.
type Memory struct {
	End  uint64 `json:"end"`
	Peak uint64 `json:"peak"`
}

// Disk is how much the store grew per write: its file, the pages bbolt
// uses (the file's high-water mark), and each bucket's pages.
type Disk struct {
	FilePerWrite  float64            `json:"file_bytes_per_write"`
	PagesPerWrite float64            `json:"page_bytes_per_write"`
	Buckets       map[string]float64 `json:"bucket_bytes_per_write"`
}

// Ratio is writerd's number divided by a baseline's: above 1, writerd
// writes more a second, or waits longer.
type Ratio struct {
	WritesPerSecond float64 `json:"writes_per_second"`
	P50             float64 `json:"p50"`
	P99             float64 `json:"p99"`
}

// compare sets each baseline's ratio.
func (r *Report) compare() {
	w := r.Writerd
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return round(a/b, 2)
	}
	for _, b := range r.Baselines {
		if w.Latency == nil || b.Latency == nil {
			continue
		}
		b.Ratio = &Ratio{
			WritesPerSecond: div(w.WritesPerSecond, b.WritesPerSecond),
			P50:             div(w.Latency.P50, b.Latency.P50),
			P99:             div(w.Latency.P99, b.Latency.P99),
		}
	}
}

func round(f float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(f*p) / p
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable prints the report for a person: a header, one row a run,
// writerd's against each baseline, then writerd's errors, CPU, memory and
// disk.
func (r *Report) WriteTable(w io.Writer) {
	where := map[string]string{TargetInproc: "in process", TargetAPI: "over the direct API", TargetMCP: "over MCP Streamable HTTP", TargetStdio: "over MCP stdio",
		TargetUpstream: "to the fake upstream over Streamable HTTP, in process"}[r.Target]
	if r.Upstream != nil && r.Upstream.Transport == UpstreamStdio {
		where = "to the fake upstream over stdio, in process"
	}
	if r.Upstream != nil && r.Upstream.Transport == UpstreamAPI {
		where = "to the fake HTTP API, keyed in Idempotency-Key, in process"
	}
	switch r.Client {
	case ClientBench:
		where += " (bench's client)"
	case ClientSDK:
		where += " (the SDK's client)"
	}
	agents := fmt.Sprintf("%d agents", r.Agents)
	if r.Agents == 1 {
		agents = "1 agent"
	}
	fmt.Fprintf(w, "writerd bench: %s %s, %s for %s, arguments of %d bytes, fsync on\n\n",
		r.Tool, where, agents, trimFloat(r.Duration)+"s", r.ArgBytes)
	rows := [][]string{{"RUN", "WRITES", "WRITES/S", "P50", "P90", "P99", "MAX", "COMMITS/S", "WRITES/COMMIT", "MS/COMMIT", "CPU/WRITE", "ERRORS"}}
	for _, run := range append([]*Result{r.Writerd}, r.Baselines...) {
		row := []string{run.Name, thousands(float64(run.Writes)), thousands(run.WritesPerSecond)}
		if l := run.Latency; l != nil {
			row = append(row, millis(l.P50), millis(l.P90), millis(l.P99), millis(l.Max))
		} else {
			row = append(row, "-", "-", "-", "-")
		}
		commit := "-"
		if run.CommitMillis > 0 {
			commit = fmt.Sprintf("%.2f", run.CommitMillis)
		}
		row = append(row, thousands(run.CommitsPerSecond), fmt.Sprintf("%.1f", run.WritesPerCommit), commit, "-", thousands(float64(errorCount(run.Errors))))
		if run.CPU != nil {
			row[10] = micros(run.CPU.PerWriteMicros)
			if run.CPU.ServerPerWriteMicros != nil {
				row[10] += " + " + micros(*run.CPU.ServerPerWriteMicros)
			}
		}
		rows = append(rows, row)
	}
	writeRows(w, rows)

	if len(r.Baselines) > 0 {
		fmt.Fprintf(w, "\nwriterd against each (writerd's divided by the run's):\n\n")
		rows = [][]string{{"RUN", "WRITES/S", "P50", "P99"}}
		for _, b := range r.Baselines {
			if b.Ratio == nil {
				rows = append(rows, []string{b.Name, "-", "-", "-"})
				continue
			}
			rows = append(rows, []string{b.Name, times(b.Ratio.WritesPerSecond), times(b.Ratio.P50), times(b.Ratio.P99)})
		}
		writeRows(w, rows)
	}

	run := r.Writerd
	fmt.Fprintln(w)
	lines := [][2]string{{"errors", errorList(run.Errors)}}
	if c := run.CPU; c != nil {
		s := fmt.Sprintf("%.2f s, %s a write", c.Seconds, micros(c.PerWriteMicros))
		if c.Server != nil {
			s = fmt.Sprintf("bench %.2f s (%s a write), daemon %.2f s (%s a write)", c.Seconds, micros(c.PerWriteMicros), *c.Server, micros(*c.ServerPerWriteMicros))
		}
		lines = append(lines, [2]string{"cpu", s})
	}
	if h := run.Heap; h != nil {
		who := ""
		if r.Target != TargetInproc && r.Target != TargetUpstream {
			who = "the daemon's: "
		}
		lines = append(lines, [2]string{"heap in use", fmt.Sprintf("%s%s at the end, %s at the peak", who, mib(h.End), mib(h.Peak))})
	}
	if m := run.RSS; m != nil {
		lines = append(lines, [2]string{"resident", fmt.Sprintf("the daemon's: %s at the end, %s at the peak", mib(m.End), mib(m.Peak))})
	}
	if d := run.Disk; d != nil {
		lines = append(lines, [2]string{"disk", fmt.Sprintf("%s bytes a write in the file, %s in pages bbolt uses (%.1f× the arguments)",
			thousands(d.FilePerWrite), thousands(d.PagesPerWrite), d.PagesPerWrite/float64(max(1, r.ArgBytes)))})
		names := slices.Sorted(maps.Keys(d.Buckets))
		slices.SortStableFunc(names, func(a, b string) int { return int(math.Round(d.Buckets[b] - d.Buckets[a])) })
		var parts []string
		for _, n := range names {
			if d.Buckets[n] != 0 {
				parts = append(parts, fmt.Sprintf("%s %s", n, thousands(d.Buckets[n])))
			}
		}
		if len(parts) > 0 {
			lines = append(lines, [2]string{"by bucket", strings.Join(parts, ", ")})
		}
	}
	if u := r.Upstream; u != nil {
		lines = append(lines, [2]string{"upstream", fmt.Sprintf("p50 %s above the direct calls' (p99 %s); %s create_project's writes a second",
			signedMillis(u.P50AboveDirect), signedMillis(u.P99AboveDirect), times(u.VsCreateProject))})
		lines = append(lines, [2]string{"a write", fmt.Sprintf("%.2f transactions, %.2f commits (create_project: %.2f, %.2f)",
			u.Transactions.Upstream, u.Commits.Upstream, u.Transactions.CreateProject, u.Commits.CreateProject)})
		if st := u.Steps; st != nil {
			lines = append(lines, [2]string{"steps (p50)", fmt.Sprintf("until the pending record is committed %s, the call %s, the completion %s",
				millis(st.Pending), millis(st.Call), millis(st.Completion))})
		}
		fsync := "its ledger written without fsync (--upstream-fsync to flush it)"
		if u.Fsync {
			fsync = "its ledger fsynced before each answer, group-committed"
		}
		lines = append(lines, [2]string{"the fake", fsync})
	}
	if r.Store == "given" {
		lines = append(lines, [2]string{"store", fmt.Sprintf("--data, %s before the run", mib(uint64(r.StoreBytes)))})
	}
	for _, l := range lines {
		fmt.Fprintf(w, "%-13s%s\n", l[0]+":", l[1])
	}
}

// writeRows prints rows in columns, each cell but the last of a row
// padded to its column's widest and two spaces.
func writeRows(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func errorCount(errs map[string]int64) int64 {
	var n int64
	for _, v := range errs {
		n += v
	}
	return n
}

// errorList writes errors by code, the most frequent first.
func errorList(errs map[string]int64) string {
	if len(errs) == 0 {
		return "none"
	}
	codes := slices.Sorted(maps.Keys(errs))
	slices.SortStableFunc(codes, func(a, b string) int { return int(errs[b] - errs[a]) })
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s %s", c, thousands(float64(errs[c]))))
	}
	return strings.Join(parts, ", ")
}

// millis writes a latency in ms with three significant digits or so.
func millis(f float64) string {
	switch {
	case f < 1:
		return fmt.Sprintf("%.2f ms", f)
	case f < 100:
		return fmt.Sprintf("%.1f ms", f)
	}
	return thousands(f) + " ms"
}

// signedMillis writes a difference of latencies, its sign kept.
func signedMillis(f float64) string {
	if f < 0 {
		return "-" + millis(-f)
	}
	return millis(f)
}

func micros(f float64) string { return thousands(f) + " µs" }

func times(f float64) string { return fmt.Sprintf("%.2f×", f) }

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// trimFloat writes a number without trailing zeros: 10, 0.3.
func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", f), "0"), ".")
}
