// Package bench is writerd bench: it drives writes at a chosen
// concurrency and reports what they cost, against writerd and, in the
// same run, against baselines that do less.
//
// Run takes a Config, which cmd/writerd's flags fill, and returns a
// Report, which prints as a table or as JSON. Each of Config.Agents agents
// sends one write after another for Config.Duration, each with an
// idempotency key of its own and arguments of about ArgBytes; names and
// keys hold a run id, so that a run on a store written before, or a
// daemon's, never meets an earlier run's. The targets:
//
//   - TargetInproc: a daemon assembled as serve assembles it
//     (internal/daemon: the store, the audit log and its checkpointer, the
//     key collector, a JSON log to nowhere), called as a Go program
//     embedding the pipeline calls it, on a fresh data directory, a given
//     one, or a scratch PostgreSQL database dropped at the end;
//   - TargetAPI and TargetMCP: running daemons over the direct API or MCP
//     Streamable HTTP, the agents spread over Config.Servers (the
//     replicas of one store), through bench's own MCP client (ClientBench)
//     or the SDK's (ClientSDK);
//   - TargetStdio: one writerd serve --stdio that bench starts, every
//     agent's calls on its one stdin, matched to their answers by id;
//   - TargetUpstream: writes to an upstream MCP server (the tests' fake,
//     package upstreamtest, over Streamable HTTP or, with
//     Config.UpstreamTransport, as a stdio child) through a pipeline in
//     process, against the same agents calling the fake directly with
//     the SDK's client and writerd's own create_project, in the same run
//     (upstream.go).
//
// What a run measures: writes a second; the latency of successful writes
// (p50, p90, p99, max); failures by code; commits a second, writes per
// commit and the time of a commit; CPU per write; heap in use; in process,
// the bytes the store grew per write, by bucket. A daemon's commits,
// memory and CPU are read from its /metrics before and after the run,
// summed over the servers.
//
// The baselines (Config.Baseline), each on a fresh data directory with
// writerd's page size and fsync on, for the same duration and agents: in
// process, the raw bbolt store doing the puts of one write (three values:
// the entity, the key's record, the audit event) in one transaction, by
// db.Update, db.Batch at 10 ms and at 1 ms, and writerd's group commit
// without the pipeline; over MCP, the pipeline in process and a bare MCP
// server on the same SDK (create_project into bbolt, no idempotency, no
// audit, no strict parse); over stdio, the pipeline in process. The
// raw-store baselines are why this package, alone outside storage/ and
// the daemon's assembly, imports go.etcd.io/bbolt and storage/bolt: they
// measure bbolt itself.
//
// Caveats:
//
//   - bench shares the machine's cores with what it measures: in process
//     with the pipeline, on one host with the daemon or the stdio server.
//     Its own CPU is reported apart from a daemon's, and its own MCP client
//     exists because the SDK's costs more CPU a write than the daemon it
//     measures; the throughput figures are still those of the pair.
//   - The runs of one bench (writerd's, then each baseline's) follow one
//     another and are compared as ratios within it; figures of runs made
//     at different times, or on other machines, compare less well.
//   - A daemon's /metrics counts every commit it made during the run,
//     other clients' included.
//   - A write in flight when the duration ends is finished and counted;
//     only successful writes have their latency kept.
//   - Bytes on disk are known only where the backend tells its size
//     (bbolt), not on PostgreSQL.
//   - TargetStdio starts the running executable as writerd serve --stdio:
//     it runs only from the writerd binary, not from a test binary.
//   - It asserts no figure: a regression shows as a ratio, read by a person.
//
// The package is layer 7 of DESIGN section 2, beside internal/daemon: it
// may import every package but cmd, and only cmd/writerd imports it.
package bench
