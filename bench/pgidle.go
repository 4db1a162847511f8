package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/postgres"
)

// pgIdleAdaptq runs an idle listener on a PostgreSQL queue with the
// driver's native notify as its trigger, in virtual time (the listener and
// the DB on one fake clock, the database real), and returns its queue
// calls (meter) and statements (tracer, the LISTEN connection's included)
// per hour once its backoff has reached the safety interval.
func pgIdleAdaptq(ctx context.Context, base string, hours int) (calls, statements float64, err error) {
	fc := clock.NewFake(clock.Epoch)
	s, err := openPGSide(ctx, base, nil, postgres.WithClock(fc))
	if err != nil {
		return 0, 0, err
	}
	defer s.close()
	n := &listener.LocalNotifier{}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	sig, err := s.q.Subscribe(runCtx)
	if err != nil {
		return 0, 0, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-sig:
				n.Notify(s.q.Name())
			}
		}
	})
	l, err := listener.New(s.q, noop, listener.Options{Tasks: 1, MinTasks: 1, Clock: fc, Notifier: n})
	if err != nil {
		return 0, 0, err
	}
	if err := l.Start(runCtx, 1); err != nil {
		return 0, 0, err
	}
	defer func() {
		cancel()
		_ = l.Wait()
		wg.Wait()
	}()
	asleep := func() (time.Duration, error) {
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if !fc.WaitPending(wctx, 1) {
			return 0, fmt.Errorf("the listener did not go to sleep: %w", errTimeout)
		}
		ds := fc.Deadlines()
		return ds[len(ds)-1], nil
	}
	limit := l.Options().SafetyInterval
	for {
		d, err := asleep()
		if err != nil {
			return 0, 0, err
		}
		if d >= limit {
			break
		}
		fc.AdvanceToNext()
	}
	// Let the LISTEN connection's start (and the wake it sends) settle.
	time.Sleep(500 * time.Millisecond)
	if _, err := asleep(); err != nil {
		return 0, 0, err
	}
	m0, st0 := s.m.Snapshot(), s.calls.n.Load()
	end := fc.Now().Add(time.Duration(hours) * time.Hour)
	for {
		if _, err := asleep(); err != nil {
			return 0, 0, err
		}
		next, ok := fc.NextDeadline()
		if !ok || next.After(end) {
			break
		}
		fc.AdvanceToNext()
	}
	got := s.m.Snapshot().Sub(m0)
	st := s.calls.n.Load() - st0
	return float64(got.Total()) / float64(hours), float64(st) / float64(hours), nil
}

// pgIdleRiver starts River's client with its default settings on an empty
// queue and counts the statements its pool sends in window (after a
// second to start), per hour.
func pgIdleRiver(ctx context.Context, base string, window time.Duration) (float64, error) {
	r, err := openRiverSide(ctx, base)
	if err != nil {
		return 0, err
	}
	defer r.close()
	c, err := r.client(&river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}})
	if err != nil {
		return 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.Start(runCtx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = c.Stop(sctx)
	}()
	time.Sleep(time.Second)
	st0 := r.calls.n.Load()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	st := r.calls.n.Load() - st0
	return float64(st) * float64(time.Hour) / float64(window), nil
}
