// Package daemon is the one assembly of a writerd daemon: it opens the
// store, the audit signing key, the pipeline with the built-in tools, the
// metrics, the checkpointer and the key collector (Open, Run), and puts
// the transports in front of them (HTTPServer, ServeStdio). serve, bench
// and the tests that need a daemon in process build theirs here, so that
// all are made alike.
//
// It is also the one place a backend is chosen for a daemon (store.go;
// bench's raw-store baselines open bbolt themselves, to measure it):
// StoreConfig names the store, open and OpenReadOnly open it on its
// backend and turn that backend's errors into the daemon's (ErrHeld,
// ErrNoStore, ErrOldStore, *DamagedError). Everything else sees the store
// as a pipeline.Store and asks what it can do, never which backend it
// is: the capabilities of pipeline (Leader, Backuper, …) of an open store,
// and StoreConfig.Exclusive of a store to be opened. A store without Lead
// is never taken to lead, so that its log is never signed. A store that is held or cannot be reached yet opens in
// the background (Pending), while every call is answered UNAVAILABLE with
// the backend's sentence.
//
// Caveats: the package is internal to writerd; a Go program that embeds
// the pipeline builds its own from pipeline and a backend's package.
package daemon
