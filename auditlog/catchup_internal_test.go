package auditlog

import (
	"slices"
	"testing"
)

// Ensure a late pass signs every multiple of Every it missed, up to
// maxCatchUp of them, then the latest alone: at the bound and past it.
func TestDueMultiples(t *testing.T) {
	for _, tc := range []struct {
		signed, size, every uint64
		want                []uint64
	}{
		{0, 10, 10, []uint64{10}},
		{0, 19, 10, []uint64{10}},
		{0, 40, 10, []uint64{10, 20, 30, 40}},
		{10, 45, 10, []uint64{20, 30, 40}},
		{0, 100, 10, []uint64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}},
		{0, 110, 10, []uint64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110}},
		{5, 10_009, 1000, []uint64{1005, 2005, 3005, 4005, 5005, 6005, 7005, 8005, 9005, 10005}},
		{0, 1_000_000, 1, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1_000_000}},
	} {
		if got := dueMultiples(tc.signed, tc.size, tc.every); !slices.Equal(got, tc.want) {
			t.Errorf("dueMultiples(%d, %d, %d) = %v, want %v", tc.signed, tc.size, tc.every, got, tc.want)
		}
	}
}
