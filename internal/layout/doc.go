// Package layout holds no code: its tests hold the module to the layout
// docs/DESIGN.md section 2 describes.
//
// TestLayers reads that section's layer table and the non-test imports of
// every package of the module, as go list reports them, and fails on an
// import that runs back up a layer, on an import of storage/internal from
// outside storage/, on a package of a "stdlib" row that imports anything
// else, and on a package the table does not place. TestNoDatabase keeps
// the drivers and the backends to the assembly, the backends themselves
// and bench's raw-store baselines. TestDevelopmentTree holds the tree of
// docs/DEVELOPMENT.md to the folders that exist.
//
// The tests need the go command on PATH, as go test itself does. Test
// files are left out on purpose: a test may reach up (storetest's
// backends, bolttest's damaged files), since nothing links it.
package layout
