// Package storetest is the storage conformance suite: every promise of a
// store that docs/DESIGN.md sections 1, 5 and 7 and group commit (section
// 11) make, tested once, through the interfaces, against any backend.
//
// A backend runs it by giving Run a constructor of its stores (a
// Backend):
//
//	func TestConformance(t *testing.T) { storetest.Run(t, storetest.InDir(boltstore.Open)) }
//
// The suite runs the built-in tools on the backend's handlers.Store, and
// test tools of its own on the same pipeline (test_fail, test_panic,
// test_wait; tools.go), so that a backend implements one domain store.
// It reads what was written through the same interfaces the daemon uses:
// the key store, the audit log's read seam, the domain store. After each
// test it checks the store as writerd check does (handlers.CheckStore).
//
// Env, the pipeline on a fresh store that the suite's tests use, is also
// what the pipeline's and the tools' own tests run on, with tools of
// their own beside.
//
// Caveats: the suite tests what a store keeps and answers, not how fast;
// the claim rule across processes is tested with two pipelines on one
// store, each with its own key locks, which is what a second process is
// to a store shared by processes.
package storetest
