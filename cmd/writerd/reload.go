package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/writerd/writerd/internal/daemon"
)

// reloadUpstreamsOnHangup reloads the upstreams file at path on each
// SIGHUP until ctx ends, beside the tokens' reload: a file that fails to
// load, or that the daemon cannot put in force, leaves the config loaded
// before in force, and the one log line says why. It listens from the
// moment it returns; the reloads run in the background.
func reloadUpstreamsOnHangup(ctx context.Context, log *slog.Logger, d *daemon.Daemon, path string) (run func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				cfg, err := loadUpstreams(path)
				if err == nil {
					err = d.ReloadUpstreams(cfg)
				}
				if err != nil {
					log.Error("reload the upstreams file; the upstreams loaded before stay in force", "cause", err.Error())
				}
			}
		}
	}
}
