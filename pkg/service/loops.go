package service

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// Loop is a background loop of a service (a queue worker, a planner, a sync, a monitor): Run
// works until its context ends, then returns; an error it returns stops the service.
type Loop struct {
	Name string
	Run  func(ctx context.Context) error
}

// RunWithLoops runs the service (Run) with its background loops beside it, in one errgroup.
// The loops start before the server listens and keep working while requests drain: they are
// stopped by a shutdown hook, so after the HTTP server has stopped and the OnShutdown hooks
// registered before this call have run, and before the pools close (OnClose). A loop that fails
// stops the server too, and its error is returned.
func (s *Service) RunWithLoops(ctx context.Context, loops ...Loop) error {
	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoops()
	g, gctx := errgroup.WithContext(loopCtx)
	for _, l := range loops {
		g.Go(func() error {
			if err := l.Run(gctx); err != nil {
				return fmt.Errorf("%s: %w", l.Name, err)
			}
			return nil
		})
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	go func() { <-gctx.Done(); stopServing() }() // a failed loop stops the server
	s.OnShutdown("background loops", func(context.Context) error {
		stopLoops()
		_ = g.Wait() // its error is RunWithLoops'
		return nil
	})
	err := s.Run(serveCtx)
	stopLoops()
	return errors.Join(err, g.Wait())
}
