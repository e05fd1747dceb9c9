package storetest_test

import (
	"testing"

	"github.com/writerd/writerd/pipeline/boltdb/boltstore"
	"github.com/writerd/writerd/pipeline/storetest"
)

// The backends the suite runs on, each by the constructor of its stores.

// Ensure the embedded bbolt store keeps every promise.
func TestBolt(t *testing.T) { storetest.Run(t, storetest.InDir(boltstore.Open)) }
