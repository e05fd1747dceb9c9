// Package loopback tells loopback hosts apart: the daemon binds and
// serves them without TLS or tokens where it would refuse another host.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether hostport, a host or a host and a port (an IPv6
// address bracketed or not), is localhost in any case or a loopback IP.
// The wildcard (0.0.0.0, ::) is not loopback.
func Host(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
