// Package upstream puts the tools of upstream MCP servers behind writerd
// (docs/DESIGN.md section 5b, docs/UPSTREAMS.md): the config file that
// declares them, the supervised connection to each (a stdio child that
// writerd starts, or Streamable HTTP), the pins of their definitions, and
// the pipeline tools that export them, each write claimed by a pending
// record before it leaves. An HTTP API's endpoints become tools the same
// way (api.go, apitools.go): a route per tool, an API client that never
// sends a request twice on its own, and statuses mapped to what they
// mean for the write; their config keys are still to come.
//
// Nothing an upstream says is trusted: its tool annotations are hints,
// its definitions are pinned by the operator, its answers pass the strict
// parse, and its text (error messages, stderr, results that cannot be
// returned) never reaches a caller or the info-level log.
package upstream
