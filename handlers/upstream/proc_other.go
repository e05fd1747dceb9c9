//go:build unix && !linux

package upstream

import "syscall"

// sysProcAttr puts a stdio child in a process group of its own. Outside
// Linux there is no Pdeathsig: a child outlives a writerd killed by
// SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
