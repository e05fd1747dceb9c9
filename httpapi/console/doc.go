// Package console is the audit console: the pages an auditor opens in a
// browser instead of typing writerd audit commands, served read-only by
// the daemon under /ui/ (docs/DESIGN.md section 7, "The audit console").
//
// It shows four pages, each drawn on the server with html/template and
// working without JavaScript: Trust (the latest checkpoint, the daemon's
// check of its own log, the witnesses, the key to pin and the writerd
// audit verify command to run offline), Events (the list of writerd audit
// list, newest first unless it says oldest, with its filters as a form
// whose URL can be bookmarked, tool, outcome and code as choices of the
// values the log holds, a refused filter said on the page with the others
// kept, the same cursor, and a JSON Lines export of the selection), Event (every member,
// the format, a write's upstream member and a resolution's link to the
// event it resolves among them, the inclusion proof checked against the
// signed checkpoint as writerd audit show checks it) and Activity (writes
// and failures over time by tool and by principal, and the failure codes,
// as SVG drawn on the server; an unknown write counts with the failures,
// its code OUTCOME_UNKNOWN among theirs). It reads the log through the audit protocol's Local
// (auditapi.Local), as the audit API and writerd audit --data do, and
// writes nothing to the store.
//
// Why sessions. A browser sends no bearer header when it follows a link,
// so the sign-in page takes an audit token once (POST /ui/signin), asks
// the daemon's authentication who it stands for (Config.SignIn), and
// keeps, in this process's memory, a session: a random 256-bit id, the
// caller's principal and scopes, and when it ends. The browser holds the
// id in the cookie writerd_console (HttpOnly, SameSite=Strict, Path=/ui/,
// Secure unless the request came over plain HTTP to a loopback
// listener and Config.PublicURL is not https); the token itself is kept nowhere, neither in the cookie, nor
// in a page, nor in memory after the sign-in answered. The store is keyed
// by the SHA-256 of the id, so that not even it holds a usable cookie.
// Only a token with the audit scope signs in: a read or write token is
// answered 403, an unknown one 401.
//
// Choices, and their bounds:
//
//   - A session lasts SessionTTL (30 minutes) from its sign-in, however
//     busy: absolute, not sliding, so that a revoked token's session ends
//     within 30 minutes whatever the browser does. The console does not
//     ask the tokens file again meanwhile.
//   - At most MaxSessions (1000) sessions live at once; a sign-in beyond
//     evicts the oldest, and every sign-in sweeps the expired ones (a
//     lookup drops an expired one too), so memory stays bounded without a
//     goroutine of its own.
//   - Sessions live in one process. Behind several replicas, a load
//     balancer must send a browser to the replica it signed in on (sticky
//     sessions), or the auditor signs in on each; a restart ends every
//     session.
//   - A filter beyond the time range (tool, principal, key, …) is checked
//     event by event, as the audit API's list does; a page reads at most
//     ScanBudget events (200,000) for at most ScanTime (50 ms) and, if it
//     found fewer events than a page holds by then, offers to go on from
//     the last event it read, with the same cursor (newest first, the log
//     is read backwards in chunks of up to 4096 events and the bounds are
//     checked between them): a filter that matches little on a million
//     events answers in pages, not in one long wait. An event's stored
//     bytes are searched for the filter's value, as its canonical JSON
//     writes it, before the event is decoded; an event whose bytes are not
//     canonical (a damaged log: writerd audit verify names it) may then be
//     passed over.
//   - Activity is counted in memory, an hour at a time (UTC), as events
//     come: the first page after a start counts the log in the background,
//     says how far it got and when it will be done, at the rate so far,
//     and reloads itself (a meta refresh, no script) until then; then each
//     page counts only the events new since. The same counts give the
//     Events form its choices of tool, outcome and code. At most MaxPrincipals (200) principals, tools and codes each
//     are told apart; the rest are counted as "other", and a chart shows
//     its top six and folds the others. The page's ranges: the last 24
//     hours in bars of an hour, 7 days in bars of 6 hours, 30 days in bars
//     of a day, and all of the log in at most 60 bars of whole hours; with
//     none chosen, all of a log younger than 30 days (a day-old log is not
//     one bar at the right of 30 days), else 30 days. Memory grows with the hours that hold events times the
//     names seen in each (bounded by the caps above), not with the events.
//
// Every console answer (pages, redirects, errors, static files) carries a
// Content-Security-Policy that allows no inline script or style, no
// frames and forms only to the console itself, and nosniff,
// no-referrer and DENY for frames; pages are no-store, the static files
// immutable under a name of their content. Every value from the log
// (principals, keys, targets, request ids, tools) is template data,
// escaped where it is written. The POSTs (sign-in, sign-out) pass the
// HTTP edge's cross-origin check (net/http's CrossOriginProtection), as
// every request does.
//
// What it does not do: it is no substitute for writerd audit verify with
// a key kept since the first day. It checks proofs with the daemon's own
// verifier key, which is what a daemon rewritten by whoever holds the key
// would show too; the Trust page gives the command that does not rest on
// the daemon.
package console
