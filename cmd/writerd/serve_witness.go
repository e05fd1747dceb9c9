package main

import (
	"strings"

	"github.com/writerd/writerd/auditlog/witness"
)

// serveWitnessUsage is the part of serve's usage about witnesses.
const serveWitnessUsage = `With --witness VKEY@URL (repeatable), each checkpoint is sent to that
witness (C2SP tlog-witness: litewitness, or any other), by the process
that signs: VKEY is the witness's verifier key as it prints it, URL its
base URL. Its cosignature is kept with the checkpoint and served with it
(/v1/audit/checkpoint, the tiles' checkpoint), so that an auditor can
require it (writerd audit verify --witness VKEY --quorum N). On the
witness, add the log first: witnessctl add-log -origin ORIGIN and
witnessctl add-key -origin ORIGIN -key KEY, where KEY is what writerd
audit key prints and ORIGIN its name, before its first +. A witness
that is down or refuses is retried with backoff and never holds up a
write or a checkpoint; a checkpoint with fewer cosignatures than
--witness-quorum (default: every witness given) is logged once and
counted in writerd_audit_checkpoints_without_quorum_total. In the
environment, WRITERD_WITNESS takes them separated by spaces.

`

// parseWitnesses parses the --witness values and checks
// --witness-quorum. Its sentences never repeat a value: a witness's URL
// may hold credentials.
func (c *ServeCommand) parseWitnesses(fs *flagSet) error {
	var given []string
	for _, v := range c.witnessFlags {
		given = append(given, strings.Fields(v)...)
	}
	seen := map[string]int{}
	for i, v := range given {
		w, err := witness.Parse(v)
		if err != nil {
			return fs.fail("%s (%d of %d): %s", fs.label("witness"), i+1, len(given), err)
		}
		if j, ok := seen[w.VerifierKey()]; ok {
			return fs.fail("%s %d and %d name the same witness key; give each witness once", fs.label("witness"), j+1, i+1)
		}
		seen[w.VerifierKey()] = i
		c.witnesses = append(c.witnesses, w)
	}
	switch n := len(c.witnesses); {
	case c.witnessQuorum < 0:
		return fs.fail("%s takes a whole number of witnesses, such as 2", fs.label("witness-quorum"))
	case c.witnessQuorum > 0 && n == 0:
		return fs.fail("%s needs %s VKEY@URL: it counts their cosignatures", fs.label("witness-quorum"), fs.label("witness"))
	case c.witnessQuorum > n:
		return fs.fail("%s %d is more than the %d witnesses given with %s", fs.label("witness-quorum"), c.witnessQuorum, n, fs.label("witness"))
	case c.witnessQuorum == 0:
		c.witnessQuorum = n // the default: every witness given
	}
	return nil
}

// witnessNames names the witnesses by their keys' names, for the
// start-up line: never their URLs.
func witnessNames(ws []*witness.Witness) string {
	var names []string
	for _, w := range ws {
		names = append(names, w.Name())
	}
	return strings.Join(names, ",")
}
