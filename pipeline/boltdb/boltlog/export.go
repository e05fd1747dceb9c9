package boltlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// Export writes the export of the events from sequence number from through
// the latest checkpoint's size.
func (l Log) Export(tx *kv.Tx, w io.Writer, from uint64, verifierKey string) error {
	size, signed, err := l.LatestCheckpoint(tx)
	if errors.Is(err, auditlog.ErrNotFound) {
		return auditlog.ErrNoCheckpoint
	}
	if err != nil {
		return err
	}
	from = max(from, 1)
	if from > size+1 {
		from = size + 1
	}
	prefix, err := l.Prefix(tx, from-1)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	header, err := json.Marshal(auditlog.ExportHeader{Version: auditlog.ExportVersion, VerifierKey: verifierKey, Checkpoint: string(signed), Prefix: prefix})
	if err != nil {
		return err
	}
	bw.Write(append(header, '\n'))
	err = rawFrom(tx, from, func(seq uint64, c []byte) error {
		if seq > size {
			return errStop
		}
		bw.Write(c)
		return bw.WriteByte('\n')
	})
	if err != nil && err != errStop {
		return err
	}
	return bw.Flush()
}
