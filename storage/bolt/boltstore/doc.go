// Package boltstore is the domain store of the built-in tools on bbolt: it
// implements handlers.Store inside the caller's transaction, so a tool's
// change commits together with the call's idempotency record and audit
// event. Domain and Open make it the daemon's store on bbolt, with Check,
// its physical checks (values that read back, keys that match ids, no
// record without its project); what the tools promise of their store on
// any backend is handlers.Check.
//
// Layout: "projects" maps a project id to the project's JSON;
// "project_names" maps the comparison key of each project's name
// (handlers.NameKey: the PRECIS Nickname form, case mapped) to the
// project's id, which keeps names unique as agents compare them; "records"
// maps a project id followed by a record id to the record's JSON. Ids are
// ULIDs of fixed length, so a project's records are one key range in id
// order (creation order), which lists scan and which HasRecords and
// DeleteProject probe with one seek.
//
// Caveats: entities are stored as the JSON of handlers.Project and
// handlers.Record, so a change to those types is a change of the stored
// format. Init must have run (in a writable transaction) before any other
// method. A database written before names were keyed by NameKey holds
// names as they were written and is not migrated.
package boltstore
