package upstream

import "syscall"

// sysProcAttr puts a stdio child in a process group of its own and has
// the kernel kill it when the thread that forked it exits (see child).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
