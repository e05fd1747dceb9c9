// Package auditapi is writerd's audit protocol: the HTTP API a daemon
// serves at /v1/audit (Server), the client the audit commands read it
// with (Client), and what both answer from a store (Local), with one set
// of wire types between them (wire.go).
//
// As golang.org/x/mod/sumdb puts a protocol's server and client in one
// package over an interface to storage, the three here share one Source
// interface: Local reads the log through auditlog's read seam
// (auditlog.Viewer, which every backend provides), Server answers HTTP
// requests from a Local, and Client asks a Server and answers the same
// Source calls from what it sends. So writerd audit prints the same,
// byte for byte, whether it reads a data directory or a running daemon.
//
// The server answers errors with the pipeline's envelope and refuses a
// caller without the audit scope; it is read-only. Below /v1/audit/tlog/
// it serves the log as C2SP tlog-tiles (tlog.go), which TlogPublic opens
// to callers without a token. The package imports no
// storage: the daemon's HTTP edge (httpapi) mounts the server's
// routes behind its own authentication.
package auditapi
