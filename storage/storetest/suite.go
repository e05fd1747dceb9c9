package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/writerd/writerd/pipeline"
)

// A Test is one promise of the suite, run against a backend.
type Test struct {
	Name    string
	Promise string
	Run     func(t *testing.T, b Backend)
}

// Tests are the suite's promises, one each. Run runs them all.
var Tests = []Test{
	// Section 5: idempotency.
	{"ReplayByteForByte", "an identical retry, whatever its member order, whitespace or escapes, replays the first answer byte for byte, across a reopen, and writes nothing", testReplay},
	{"ChangedRetryRefused", "a key spent on one request refuses another with IDEMPOTENCY_KEY_REUSED and writes nothing", testChangedRetry},
	{"KeysPerPrincipal", "keys are scoped by principal: another principal's same key is a new write, and no two principal and key pairs share a record", testKeysPerPrincipal},
	{"OneEventPerWrite", "every dispatched write leaves exactly one audit event; replays, idempotency conflicts and rejections at stages 1 to 6 leave none, and write nothing", testOneEventPerWrite},
	{"FailureReceipt", "a refused write rolls its change back and commits a failed record and one event with its code; its retry answers IDEMPOTENCY_KEY_FAILED", testFailureReceipt},
	{"InternalErrorsLeakNothing", "an unexpected error or a panic rolls back, records one INTERNAL event, and answers the fixed message", testInternal},
	{"RecordsComeBackAsStored", "a record comes back as it was put, its result byte for byte, by Get and Claim; a Put over an expired record of its key replaces it", testRecords},
	{"TTLEdges", "a record holds its key until created_at + TTL exactly; at that instant the key runs again", testTTL},
	{"Collection", "collection deletes expired records only (one expiring exactly now is), at most a limit at a time, says whether more remain, and HasExpired whether a step is due", testCollection},
	{"ConcurrentSameKeyStorm", "many concurrent identical calls with one key, on one pipeline or two, execute once and all get the first answer", testStorm},
	{"WriteOutcome", "get_write_outcome answers without running anything: none for a key never sent, running while a call holds it (on a shared store, seen from another process too), completed with the result byte for byte as a replay returns it and the audit id, failed with its code, none at expiry and for another principal; asking writes nothing", testWriteOutcome},
	{"CancelledCallSpendsNothing", "a call whose caller went away before its write ran (before the key's lock, waiting for it, before the queue, in its batch) is answered UNAVAILABLE with retry same_key and records nothing: no event, no record, and its retry with the same key runs the write once; a write that ran completes whatever its caller does", testCancelled},
	{"StoreWaitBounded", "a write waits for the store at most its store wait: one queued behind a stalled batch is answered UNAVAILABLE with retry same_key within it and never runs, its retry running it once; one that ran past its wait is answered once it has run, and is committed once, by itself (its retry replays it) or by its retry", testStoreWait},
	{"OutcomeOfAQueuedCall", "a call queued in its replica's batch holds no claim in the store: get_write_outcome answers running in its own process and none on another replica, where resending it with the same key runs it once, the queued call then answered from its record", testOutcomeQueued},
	{"ClaimAcrossProcesses", "a key a write holds on another pipeline (another process) is waited for and replayed, or answered IDEMPOTENCY_KEY_IN_USE; it never runs twice", testClaim},
	// Section 5b: writes outside the store, in the store.
	{"PendingRecordRoundTrip", "pending, unknown (resolved or not) and settled records of writes outside the store come back as they were put, every member, their arguments and result byte for byte and their times to the nanosecond, by Get, Claim and after a reopen", testPendingRoundTrip},
	{"PendingNeverExpires", "the collector never deletes a pending record, even one whose expiry is past, and HasExpired does not count it", testPendingNeverExpires},
	{"UnknownUntilResolved", "the collector never deletes an unknown record without a resolution, even one whose expiry is past; a resolved one expires at its expiry exactly", testUnknownUntilResolved},
	{"DeleteLeavesNothing", "Delete removes a record and its index entries: Get answers nil, Unsettled and ForEach leave it out, another principal's same key stays, and the key can be put again", testDeleteLeavesNothing},
	{"UnsettledOldestFirst", "Unsettled gives every pending record and every unresolved unknown one, oldest created first, never a settled or resolved one, and stops at fn's error", testUnsettledOldestFirst},
	{"SecretMadeOnce", "the store's secret is 32 random bytes made once: nil in a read transaction before any write asked; the same for two concurrent first uses (on two replicas where the backend has them), after a reopen and on every replica; another store's is another", testSecretMadeOnce},
	{"FenceRace", "of two concurrent fenced takeovers of one pending record (Claim, Fenced, Put with attempt 2 and an owner of its own), on two replicas where the backend has them, exactly one succeeds and the other sees the fence lost", testFenceRace},
	// Section 5b: writes outside the store, through the pipeline.
	{"ExternalWriteOnce", "a write outside the store is recorded pending, durably, before it is sent (get_write_outcome: running, attempt 1), sent once with its arguments and a 43-character upstream key, completed with one event naming its upstream, its record settled without the arguments, and replayed byte for byte without a second sending", testExternalOnce},
	{"ExternalNotSent", "a call that provably never reached the upstream, or found no slot of it, answers UNAVAILABLE with same_key and leaves no record and no event; its retry runs once", testExternalNotSent},
	{"ExternalRefused", "an upstream's refusal is one failed event with UPSTREAM_REFUSED and retry new_key, its text never passed on; its retry answers IDEMPOTENCY_KEY_FAILED and sends nothing", testExternalRefused},
	{"ExternalUnknown", "a call whose outcome cannot be known is one unknown event with OUTCOME_UNKNOWN, retry never; its retry never sends; neither the TTL nor the collector ends its record; an operator's resolution (admin scope) is one event naming it, the same finding replays, the other is refused, and the key expires a TTL after it", testExternalUnknown},
	{"ExternalRedrive", "a tool that may be sent again is re-driven under the same upstream key after an uncertain sending and settles with one event; re-drives are bounded and end unknown; an unsent sending after an uncertain one leaves the outcome unknown", testExternalRedrive},
	{"ExternalCallerGone", "a caller that goes away while its call is sent does not end it: it completes, is recorded, and its retry replays", testExternalCallerGone},
	{"ExternalPendingRetry", "a retry while the record is pending, on another process, waits, then answers IDEMPOTENCY_KEY_IN_USE with same_key and sends nothing; it sees the outcome running", testExternalPendingRetry},
	{"ExternalTakeover", "a pending record past its lease is taken over by another process, fenced by its attempt: recorded unknown without sending, or re-driven with the stored arguments and upstream key; the stalled owner's completion writes nothing; within the lease nothing is taken", testExternalTakeover},
	{"ExternalRedriveWithin", "a write the upstream keeps its key for a time is re-driven by a takeover within that time, and past it is one unknown event ending key_expired, never sent again", testExternalRedriveWithin},
	{"ExternalTakeoverAtStart", "a pending record a dead process left is taken over when its lease runs out, and at once when the store opens if only one process can open it; it is then one unknown event, nothing sent", testExternalTakeoverAtStart},
	{"ExternalInFlight", "an upstream that says the key's first request still runs leaves the record pending and its caller IDEMPOTENCY_KEY_IN_USE with same_key, no event; the sweep re-drives it under the same key only after the upstream's Retry-After, to one event; a tool that may not be re-driven records it unknown", testExternalInFlight},
	{"ExternalStatuses", "an upstream's refusal with an HTTP status names the status in its answer; an upstream that says writerd's key was used with another payload is one failed INTERNAL event with retry new_key, nothing sent again", testExternalStatuses},
	{"ExternalPanic", "a panic in the upstream's sending is an unknown outcome with one event, leaking nothing, and leaves no pending record", testExternalPanic},
	{"ExternalUpstreamKey", "the upstream key is the same after a reopen, different for another principal and for the key used again after its TTL, and reveals neither", testExternalUpstreamKey},
	// Group commit (docs/DESIGN.md section 11).
	{"UpdateRollsBackOnlyItsOwn", "a write given to Update that fails or panics rolls back its own changes only; the writes beside it commit", testUpdateIsolation},
	{"FailuresDoNotDisturbNeighbours", "calls that fail or panic while others commit beside them leave their own one event each, and the others' writes whole", testNeighbours},
	{"ContendedWriteAnsweredOnce", "a write that met another transaction's lock in its batch and ran again alone is answered as the write it is: ok, not replayed, counted ok and new, never taken for a failed write", testContended},
	{"ConflictsInArrivalOrder", "writes that conflict are decided as if committed one by one: the first to run wins, the others are refused", testArrivalOrder},
	// Section 7: the audit log.
	{"AppendSequenceAndIDs", "appends get dense sequence numbers from 1, within a transaction and across them, and ULIDs of their time that only grow, even when the clock steps back; a rolled back append leaves nothing", testAppend},
	{"DenseSequenceAndTree", "sequence numbers are dense from 1 whatever failed or rolled back, and the tree recomputed from the events verifies against every checkpoint", testDenseTree},
	{"Checkpoints", "checkpoints are signed when the log grew, kept in order; inclusion and consistency proofs and exports verify", testCheckpoints},
	{"CheckpointReplaced", "a checkpoint stored again for its size replaces the first: the note with cosignature lines added comes back with them from Checkpoints and LatestCheckpoint, one per size, across a reopen, and still verifies", testCheckpointReplaced},
	{"ReadSeamListing", "the read seam lists events by every filter, pages with a cursor, and finds events by sequence number and id", testListing},
	{"EventFormat", "every event appended says its format (2), and one with an upstream or resolves member and the unknown outcome comes back whole, byte for byte, by Get, ByID, List and its outcome filter, and the tree over it verifies", testEventFormat},
	// The store.
	{"Durable", "what was committed is there after the store is closed and opened again", testDurable},
	{"OriginRecordedOnce", "the store records its audit log's origin once, durably: none until claimed, and a second claim of another origin returns the first", testOrigin},
	{"ClosedStoreUnavailable", "a closed store answers every transaction UNAVAILABLE, and a call with retry same_key", testClosed},
	{"OneLeader", "of two stores open on the same data (two replicas), one at a time leads (signs the log and sends it to witnesses), however often each asks; once the leader closes, the other leads; a store alone leads (a backend one process holds refuses the second open)", testOneLeader},
	{"ReplicasSeen", "the store tells the replicas serving on it: each one's latest word (its host and upstreams file digest) replaces its earlier, every replica lists every replica seen within a window once, by id, and one not seen within it is left out", testReplicasSeen},
	{"ReadyAndCommits", "an open store is ready, and tells every commit with the writes it held", testReadyAndCommits},
	{"BuiltinTools", "the built-in tools keep their rules on the backend's domain store: unique names as compared, renames, pages, locks, non-empty projects", testBuiltinTools},
}

// Run runs the suite against a backend: one subtest per promise, in
// parallel. Each subtest logs its promise, so that go test -v says what
// each one holds the backend to.
func Run(t *testing.T, b Backend) {
	for _, tc := range Tests {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			t.Log(tc.Promise)
			tc.Run(t, b)
		})
	}
}

// MustOK fails the test unless r succeeded.
func MustOK(t testing.TB, r *pipeline.Result) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("call failed: %s", r.ErrorJSON())
	}
}

// MustCode fails the test unless r failed with code and retry.
func MustCode(t testing.TB, r *pipeline.Result, code pipeline.Code, retry pipeline.Retry) {
	t.Helper()
	if r.Err == nil {
		t.Fatalf("call succeeded with %s, want %s", r.Output, code)
	}
	if r.Err.Code != code || r.Err.Retry != retry {
		t.Fatalf("error %s/%s (%s), want %s/%s", r.Err.Code, r.Err.Retry, r.Err.Message, code, retry)
	}
}

// projectArgs are create_project's arguments.
func projectArgs(key, name string) string {
	return fmt.Sprintf(`{"idempotency_key":%q,"name":%q}`, key, name)
}

// testArgs are a test tool's arguments.
func testArgs(key, name, cause string) string {
	if cause == "" {
		return projectArgs(key, name)
	}
	return fmt.Sprintf(`{"idempotency_key":%q,"name":%q,"cause":%q}`, key, name, cause)
}

// idOf reads the id of the entity of kind in a result.
func idOf(t testing.TB, out []byte, kind string) string {
	t.Helper()
	var m map[string]struct {
		ID       string `json:"id"`
		Revision int64  `json:"revision"`
	}
	if err := json.Unmarshal(out, &m); err != nil || m[kind].ID == "" {
		t.Fatalf("no %s in %s (%v)", kind, out, err)
	}
	return m[kind].ID
}

// mustNotLeak fails the test if an answer holds SecretMarker.
func mustNotLeak(t testing.TB, r *pipeline.Result) {
	t.Helper()
	if bytes.Contains(r.ErrorJSON(), []byte(SecretMarker)) || strings.Contains(r.Err.Message, SecretMarker) {
		t.Fatalf("the answer leaks the cause: %s", r.ErrorJSON())
	}
}
