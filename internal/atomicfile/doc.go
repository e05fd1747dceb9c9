// Package atomicfile replaces a file whole or not at all: the new content
// is written to a temporary file in the same directory, synced, renamed
// over the old name, and the directory is synced, so that after a crash
// the name holds the old file or the new one, never a part, and the
// rename itself survives.
//
// Every file writerd replaces goes through it: the self-check's state,
// the tokens file, audit export -o, the published tiles and backup -o.
//
// Caveats: the temporary file is named ".NAME.tmp-*" beside the target
// and is removed on every error and by Abort; a crash between its
// creation and the rename leaves it behind (writerd never reads it). A
// rename across file systems is refused by the system, which is why the
// temporary file is in the target's own directory. On systems where a
// directory cannot be opened for syncing (Windows), SyncDir does
// nothing. Errors are *fs.PathError, with the step that failed as Op
// ("create", "write", "sync", "close", "rename", "syncdir"), so that a
// caller can word each in its own sentence.
package atomicfile
