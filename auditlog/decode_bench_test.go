package auditlog_test

import (
	"testing"

	"github.com/writerd/writerd/auditlog"
)

// BenchmarkDecodeEvent is the decode of one stored event, which List,
// the console and writerd check make of every event they walk.
func BenchmarkDecodeEvent(b *testing.B) {
	c := []byte(`{"code":"REVISION_CONFLICT","digest":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","duration_ms":1.25,"format":2,"id":"01JGJFGR830000000000000000","idempotency_key":"k-00000042","outcome":"failed","principal":"ops<bot>&1","request_id":"01JGHJ0QZ5AAAAAAAAAAAAAAAA","seq":1,"status":409,"targets":[{"id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","kind":"record","revision":3}],"time":"2025-01-02T03:04:05.123456789Z","tool":"update_record","transport":"stdio"}`)
	b.SetBytes(int64(len(c)))
	for b.Loop() {
		if _, err := auditlog.DecodeEvent(c); err != nil {
			b.Fatal(err)
		}
	}
}
