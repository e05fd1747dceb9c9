// Package metrics holds writerd's Prometheus collectors (docs/DESIGN.md section
// 9), registered on a registry the caller passes in, so that tests and
// embedding programs keep their own.
//
// Every name starts with writerd_; counters end in _total, durations in
// _seconds. Labels are bounded: tool names come from the registry (an
// unknown name counts as "unknown"), outcomes, codes, rules and kinds from
// fixed sets.
//
// All methods are safe on a nil *Metrics, which counts nothing: a pipeline
// embedded without metrics needs no stand-in.
//
// The package serves nothing itself: the HTTP edge (package httpapi)
// serves the registry at /metrics, and a daemon on stdio alone exposes no
// metrics.
package metrics
