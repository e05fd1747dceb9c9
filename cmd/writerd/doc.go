// Command writerd serves MCP write tools to AI agents: every write strictly
// parsed, idempotent under its key, and audited exactly once.
//
// main only wires: it parses the subcommand, hands over, and turns SIGINT
// and SIGTERM into a cancelled context so that every subcommand shuts down
// cleanly (the database closed, the last commit fsynced).
package main
