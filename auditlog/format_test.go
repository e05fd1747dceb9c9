package auditlog_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// format1Event is an event as writerd stored it before the event format
// had a version (format 1, no "format" member): storage/bolt/boltlog's
// golden event of that time, testdata/event.json, byte for byte.
const format1Event = `{"code":"REVISION_CONFLICT","digest":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","duration_ms":1.25,"id":"01JGJFGR830000000000000000","idempotency_key":"k-00000042","outcome":"failed","principal":"ops<bot>&1","request_id":"01JGHJ0QZ5AAAAAAAAAAAAAAAA","seq":1,"status":409,"targets":[{"id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","kind":"record","revision":3}],"time":"2025-01-02T03:04:05.123456789Z","tool":"update_record","transport":"stdio"}`

// format1Leaf is its leaf hash in the tree (RFC 6962's record hash of
// those bytes), as every checkpoint and proof made of it holds it.
const format1Leaf = "fff2805dfd0891d1bf194490aff6b5f58f15575ad8bdf88343f1a6b20762c245"

// Ensure an event of format 1 keeps its bytes and so its leaf: decoded
// and encoded again (as audit list -o jsonl, the console's export and the
// audit API's client do), and as the event it is, built in Go, it is the
// same bytes, without a format member.
func TestEvent_Format1KeepsItsBytes(t *testing.T) {
	if h := tlog.RecordHash([]byte(format1Event)); hex.EncodeToString(h[:]) != format1Leaf {
		t.Fatalf("the fixture's leaf is %x, want %s: the fixture changed", h, format1Leaf)
	}
	e, err := auditlog.DecodeEvent([]byte(format1Event))
	if err != nil {
		t.Fatal(err)
	}
	if e.Format != 0 || e.Upstream != nil || e.Resolves != nil {
		t.Errorf("decoded format %d, upstream %v, resolves %v: want format 1 (0) and neither member", e.Format, e.Upstream, e.Resolves)
	}
	built := &auditlog.Event{Seq: 1, ID: "01JGJFGR830000000000000000", Time: time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC),
		RequestID: "01JGHJ0QZ5AAAAAAAAAAAAAAAA", Principal: "ops<bot>&1", Transport: "stdio", Tool: "update_record",
		IdempotencyKey: "k-00000042", Digest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Outcome: auditlog.Failed, Code: "REVISION_CONFLICT", Status: 409,
		Targets: []auditlog.Target{{Kind: "record", ID: "01JGHJ0QZ5BBBBBBBBBBBBBBBB", Revision: 3}}, DurationMS: 1.25}
	for name, ev := range map[string]*auditlog.Event{"decoded": e, "built": built} {
		c, err := ev.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if string(c) != format1Event {
			t.Errorf("%s and encoded:\n%s\nwant the stored bytes:\n%s", name, c, format1Event)
		}
		if h := tlog.RecordHash(c); hex.EncodeToString(h[:]) != format1Leaf {
			t.Errorf("%s: leaf %x, want %s", name, h, format1Leaf)
		}
	}
}

// upstreamEvent is an unknown write outside the store, and resolution
// the operator's resolution of it.
func upstreamEvent() *auditlog.Event {
	return &auditlog.Event{Time: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), RequestID: "01KBBM7T0ZF5S1Y1M4T7N4R4QG",
		Principal: "ci-agent", Transport: "stdio", Tool: "memory_create_entities", IdempotencyKey: "ent-0001", Digest: "ab",
		Outcome: auditlog.Unknown, Code: "OUTCOME_UNKNOWN", Status: 502, DurationMS: 30000,
		Upstream: &auditlog.Upstream{Name: "memory", Tool: "create_entities", Attempt: 2, End: "timeout", DurationMS: 29999.5,
			AnswerDigest: strings.Repeat("0f", 32)}}
}

func resolution(of *auditlog.Event) *auditlog.Event {
	return &auditlog.Event{Time: of.Time.Add(time.Hour), RequestID: "01KBBM7T0ZF5S1Y1M4T7N4R4QH", Principal: "ops",
		Transport: "go", Tool: "resolve_write_outcome", IdempotencyKey: "res-0001", Digest: "cd", Outcome: auditlog.OK,
		Resolves: &auditlog.Resolution{Event: of.ID, Principal: of.Principal, Key: of.IdempotencyKey, Finding: "applied"}}
}

// Ensure an event appended now says its format, and that its upstream
// and resolves members come back whole from its stored bytes.
func TestEvent_FormatMembers(t *testing.T) {
	e := upstreamEvent()
	if err := e.Follow("", time.Time{}); err != nil {
		t.Fatal(err)
	}
	e.Seq = 1
	r := resolution(e)
	if err := r.Follow(e.ID, e.Time); err != nil {
		t.Fatal(err)
	}
	r.Seq = 2
	api := upstreamEvent()
	api.Upstream = &auditlog.Upstream{Name: "pay", Tool: "refund", Attempt: 1, End: "refused", DurationMS: 3.5,
		Method: "POST", Path: "/orders/{order}/refunds", HTTPStatus: 404}
	if err := api.Follow(r.ID, r.Time); err != nil {
		t.Fatal(err)
	}
	api.Seq = 3
	for _, ev := range []*auditlog.Event{e, r, api} {
		if ev.Format != auditlog.Format {
			t.Errorf("event %d: Follow left format %d, want %d", ev.Seq, ev.Format, auditlog.Format)
		}
		c, err := ev.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(c, []byte(`"format":3,`)) {
			t.Errorf("event %d holds no format 3: %s", ev.Seq, c)
		}
		back, err := auditlog.DecodeEvent(c)
		if err != nil {
			t.Fatalf("event %d: %v", ev.Seq, err)
		}
		if !reflect.DeepEqual(back, ev) {
			t.Errorf("event %d came back as %+v, want %+v", ev.Seq, back, ev)
		}
		if again, _ := back.Canonical(); !bytes.Equal(again, c) {
			t.Errorf("event %d encoded again:\n%s\nstored:\n%s", ev.Seq, again, c)
		}
	}
	c, _ := e.Canonical()
	for _, m := range []string{`"outcome":"unknown"`, `"upstream":{"answer_digest":"0f0f`, `"attempt":2,"duration_ms":29999.5,"end":"timeout","name":"memory","tool":"create_entities"}`} {
		if !bytes.Contains(c, []byte(m)) {
			t.Errorf("the upstream event holds no %s: %s", m, c)
		}
	}
	c, _ = api.Canonical()
	if want := `"upstream":{"attempt":1,"duration_ms":3.5,"end":"refused","http_status":404,"method":"POST","name":"pay","path":"/orders/{order}/refunds","tool":"refund"}`; !bytes.Contains(c, []byte(want)) {
		t.Errorf("the HTTP API's event holds no %s: %s", want, c)
	}
	c, _ = r.Canonical()
	if want := `"resolves":{"event":"` + e.ID + `","finding":"applied","key":"ent-0001","principal":"ci-agent"}`; !bytes.Contains(c, []byte(want)) {
		t.Errorf("the resolution holds no %s: %s", want, c)
	}
}

// Ensure an event of a later format is refused by name, alone or in a
// page of the audit API, and that a member no format has is refused,
// not dropped: nothing is listed with members missing.
func TestDecodeEvent_RefusesWhatItCannotRead(t *testing.T) {
	later := strings.Replace(format1Event, `"duration_ms":1.25,`, `"duration_ms":1.25,"format":4,"future":{"x":1},`, 1)
	for name, b := range map[string]string{
		"a later format":                  later,
		"a later format, no new member":   strings.Replace(format1Event, `"duration_ms":1.25,`, `"duration_ms":1.25,"format":4,`, 1),
		"a later format in a page":        `{"events":[` + format1Event + `,` + later + `]}`,
		"a later format in a page's list": `[` + later + `]`,
	} {
		var err error
		if strings.HasPrefix(b, `{"events"`) {
			var page struct {
				Events []*auditlog.Event `json:"events"`
			}
			err = json.Unmarshal([]byte(b), &page)
		} else if strings.HasPrefix(b, "[") {
			var list []*auditlog.Event
			err = json.Unmarshal([]byte(b), &list)
		} else {
			_, err = auditlog.DecodeEvent([]byte(b))
		}
		var fe *auditlog.FormatError
		if !errors.As(err, &fe) || fe.Seq != 1 || fe.Format != 4 {
			t.Errorf("%s: %v, want a FormatError of event 1, format 4", name, err)
			continue
		}
		if msg := fe.Error(); !strings.Contains(msg, "event 1 is of format 4") || !strings.Contains(msg, "formats 1 to 3") {
			t.Errorf("%s: %q does not say which event, its format, and the formats read", name, msg)
		}
	}
	for name, b := range map[string]string{
		"an unknown member":              strings.Replace(format1Event, `"duration_ms":1.25,`, `"duration_ms":1.25,"future":1,`, 1),
		"an unknown upstream member":     strings.Replace(format1Event, `"duration_ms":1.25,`, `"duration_ms":1.25,"format":2,"upstream":{"name":"m","secret":"x"},`, 1),
		"a format 3 member in format 2":  strings.Replace(format1Event, `"duration_ms":1.25,`, `"duration_ms":1.25,"format":2,"upstream":{"attempt":1,"duration_ms":1,"end":"answered","method":"POST","name":"m","tool":"t"},`, 1),
		"format 1 written out":           strings.Replace(format1Event, `"duration_ms":1.25,`, `"duration_ms":1.25,"format":1,`, 1),
		"a negative format":              strings.Replace(format1Event, `"duration_ms":1.25,`, `"duration_ms":1.25,"format":-1,`, 1),
		"a second value after the event": format1Event + `{}`,
	} {
		_, err := auditlog.DecodeEvent([]byte(b))
		if err == nil || errors.As(err, new(*auditlog.FormatError)) {
			t.Errorf("%s: %v, want it refused as malformed", name, err)
		}
	}
}
