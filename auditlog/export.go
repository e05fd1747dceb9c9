package auditlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// An export is JSON Lines that verify with no database and no daemon: a
// header line with the log's verifier key, its latest signed checkpoint
// and the prefix of the tree before the first event exported, then one
// line per event, from the first exported through the checkpoint's size,
// each exactly the event's canonical JSON: the leaf of the tree.

// ExportVersion is the version of the export format, in every header.
const ExportVersion = 1

// ExportHeader is an export's first line.
type ExportHeader struct {
	Version     int    `json:"writerd_audit_export"`
	VerifierKey string `json:"verifier_key"`
	Checkpoint  string `json:"checkpoint"` // the signed note
	Prefix      Prefix `json:"prefix"`
}

// ErrNoCheckpoint is returned by Export when the log has no signed
// checkpoint yet: an export must end at one to verify.
var ErrNoCheckpoint = errors.New("the audit log has no signed checkpoint yet")

// ReadExport reads an export's header, and returns it with a Stream of its
// events for Verify. Each event's sequence number is taken from its own
// JSON; Verify checks that they follow the prefix, one by one.
func ReadExport(r io.Reader) (*ExportHeader, Stream, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	line, err := br.ReadBytes('\n')
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		return nil, nil, errors.New("the export is empty")
	}
	h := new(ExportHeader)
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(h); err != nil || h.Version != ExportVersion {
		return nil, nil, errors.New("the export's first line is not a writerd audit export header")
	}
	stream := func(yield func(seq uint64, canonical []byte, leafCheck []byte) bool) error {
		for n := 1; ; n++ {
			line, err := br.ReadBytes('\n')
			line = bytes.TrimSuffix(line, []byte("\n"))
			if len(line) > 0 {
				seq, ok := seqOf(line)
				if !ok {
					seq = h.Prefix.Size + uint64(n) // its place: Verify names it malformed
				}
				if !yield(seq, line, nil) {
					return nil
				}
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	return h, stream, nil
}

// Export writes the export of the events from sequence number from through
// the latest checkpoint's size: ErrNoCheckpoint if none was signed yet. A
// from past the checkpoint exports the header alone.
func Export(r Reader, w io.Writer, from uint64, verifierKey string) error {
	size, signed, err := r.LatestCheckpoint()
	if errors.Is(err, ErrNotFound) {
		return ErrNoCheckpoint
	}
	if err != nil {
		return err
	}
	from = min(max(from, 1), size+1)
	prefix, err := PrefixOf(r, from-1)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	header, err := json.Marshal(ExportHeader{Version: ExportVersion, VerifierKey: verifierKey, Checkpoint: string(signed), Prefix: prefix})
	if err != nil {
		return err
	}
	bw.Write(append(header, '\n'))
	err = r.Leaves(from)(func(seq uint64, c, _ []byte) bool {
		if seq > size {
			return false
		}
		bw.Write(c)
		return bw.WriteByte('\n') == nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}
