package loopback_test

import (
	"testing"

	"github.com/writerd/writerd/internal/loopback"
)

func TestHost(t *testing.T) {
	for in, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:7070": true, "127.9.8.7:1": true, "localhost": true, "LocalHost:7070": true,
		"::1": true, "[::1]": true, "[::1]:7070": true, "::ffff:127.0.0.1": true,
		"0.0.0.0:7070": false, "[::]:7070": false, "10.0.0.5:7070": false, "example.com": false,
		"localhost.example.com": false, "127.0.0.1.example.com:80": false, "": false,
	} {
		if got := loopback.Host(in); got != want {
			t.Errorf("Host(%q) = %v, want %v", in, got, want)
		}
	}
}
