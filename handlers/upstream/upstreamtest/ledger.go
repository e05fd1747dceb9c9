// Package upstreamtest is the tests' fake upstream MCP server and what a
// test (or writerd bench) needs around it: building the binary
// (fakeupstream, a separate process on the official go-sdk, over stdio or
// Streamable HTTP), starting it, flipping its switches while it runs, and
// reading its ledger of executions.
//
// The ledger (a file of JSON lines, one per execution of a write tool,
// appended and fsynced before the answer leaves) is the ground truth a
// crash test counts: how many times each upstream key and each argument
// digest was executed. The fake's state (its tickets) is the ledger
// replayed, so that a restarted instance, or several sharing one ledger,
// see the same tickets; a ledger is guarded by an flock of LEDGER.lock.
//
// The tools: create_ticket (an output schema; structuredContent
// {"ticket": {...}}), close_ticket (destructiveHint), add_comment (no
// output schema; text content), view_ticket (its annotations lie: it
// declares readOnlyHint and counts a view, an execution) and get_ticket,
// the one read (no ledger entry). With keys taken (Switches.Keys), a call
// whose key is in the ledger does not execute: it answers the stored
// answer, also after a restart and from another instance; the same key
// with other arguments is refused (isError) and executes nothing.
//
// Beside the ledger live LEDGER.control (the switches in force, JSON, read
// at every call; see Switches) and LEDGER.instances/ (one file per running
// instance naming its loopback control address, which SetSwitches posts
// to so that a connected instance applies a change of definition at once
// and sends notifications/tools/list_changed).
package upstreamtest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/writerd/writerd/digest"
)

// Entry is one line of the ledger: one execution of a write tool.
type Entry struct {
	Time time.Time `json:"time"`
	Tool string    `json:"tool"`
	// UpstreamKey is the key the call carried ("" if none, or if the
	// fake was told to ignore keys).
	UpstreamKey string `json:"upstream_key"`
	// ArgsDigest is ArgsDigest of the arguments, the key left out.
	ArgsDigest string `json:"args_digest"`
	// AttemptID is unique per execution: two entries never share one.
	AttemptID string `json:"attempt_id"`
	// Instance is the pid of the fake that executed it.
	Instance int `json:"instance"`
	// Meta is the call's _meta as received, if any.
	Meta json.RawMessage `json:"meta,omitempty"`
	// Asked names the request the fake made of its client before
	// executing ("sampling", "elicitation", "roots"), answered.
	Asked string `json:"asked,omitempty"`
	// Ticket is the ticket as the execution left it.
	Ticket *Ticket `json:"ticket,omitempty"`
	// Result is the answer (a CallToolResult) as first sent; a call with
	// the same key answers it again.
	Result json.RawMessage `json:"result"`
}

// Ticket is the fake tracker's one kind of thing.
type Ticket struct {
	ID       string   `json:"id"`
	Title    string   `json:"title"`
	Body     string   `json:"body"`
	Priority string   `json:"priority"`
	Labels   []string `json:"labels"`
	Assignee string   `json:"assignee,omitempty"`
	Status   string   `json:"status"`
	Comments int      `json:"comments"`
	Views    int      `json:"views"`
}

// ArgsDigest is the ledger's digest of a call's arguments: SHA-256, in
// hex, of the RFC 8785 canonical form of the arguments object without the
// member keyArg ("" leaves nothing out).
func ArgsDigest(args json.RawMessage, keyArg string) (string, error) {
	var m map[string]json.RawMessage
	if keyArg != "" && len(bytes.TrimSpace(args)) > 0 {
		if err := json.Unmarshal(args, &m); err != nil {
			return "", fmt.Errorf("arguments: %w", err)
		}
	}
	return ArgsDigestOf(args, m, keyArg)
}

// ArgsDigestOf is ArgsDigest of args whose members m already holds
// decoded (nil when keyArg is ""): the fake decodes a call's arguments
// once.
func ArgsDigestOf(args json.RawMessage, m map[string]json.RawMessage, keyArg string) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if _, ok := m[keyArg]; ok && keyArg != "" {
		rest := make(map[string]json.RawMessage, len(m)-1)
		for k, v := range m {
			if k != keyArg {
				rest[k] = v
			}
		}
		b, err := json.Marshal(rest)
		if err != nil {
			return "", err
		}
		args = b
	}
	c, err := digest.Canonical(args)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// ReadLedger reads every entry of a ledger, in order. A missing file is
// an empty ledger; a last line without its newline (a write cut by a
// crash, never answered) is left out, as the fake itself does.
func ReadLedger(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b = b[:i+1]
	}
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("ledger line %d: %w", n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// ByKey counts executions per upstream key ("" counts the unkeyed).
func ByKey(entries []Entry) map[string]int {
	m := make(map[string]int)
	for _, e := range entries {
		m[e.UpstreamKey]++
	}
	return m
}

// ByDigest counts executions per argument digest.
func ByDigest(entries []Entry) map[string]int {
	m := make(map[string]int)
	for _, e := range entries {
		m[e.ArgsDigest]++
	}
	return m
}

// ByTool counts executions per tool.
func ByTool(entries []Entry) map[string]int {
	m := make(map[string]int)
	for _, e := range entries {
		m[e.Tool]++
	}
	return m
}
