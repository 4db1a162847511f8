package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/queue"
)

// TestManySubscribedQueuesLeavePutsServed: 10 × GOMAXPROCS + 2 queues
// opened by URL on one database (one shared client, go-redis's default
// pool of 10 × GOMAXPROCS connections), each with a subscriber, as a
// worker with that many triggered queues has. Every subscriber is woken
// by a put from another process, and a put through the shared client
// still succeeds within its own context (issue 25: each subscribed queue
// held a pooled connection forever, and with 22 queues on 2 cores Put
// waited out the pool's timeout and failed). With pool_size=2, the
// smallest, the same holds.
func TestManySubscribedQueuesLeavePutsServed(t *testing.T) {
	n := 10*runtime.GOMAXPROCS(0) + 2
	for name, extra := range map[string]string{"default_pool": "", "pool_size=2": "&pool_size=2"} {
		t.Run(name, func(t *testing.T) {
			_, prefix := newClient(t)
			producer := otherProcess(t, prefix)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			qs := make([]*queue.Queue, n)
			sigs := make([]<-chan struct{}, n)
			for i := range n {
				q, err := queue.Open(ctx, queueURL(fmt.Sprintf("many-%d", i), prefix, extra))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = q.Close() })
				qs[i] = q
				if sigs[i], err = q.Subscribe(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var g errgroup.Group
			for i := range n {
				g.Go(func() error {
					p := mustQueue(t, producer, qs[i].Name())
					// A put may land before the subscriber blocks on its
					// marker: the marker waits for it.
					if _, err := p.Put(ctx, []byte("wake"), queue.PutOptions{}); err != nil {
						return err
					}
					select {
					case <-sigs[i]:
						return nil
					case <-time.After(time.Minute):
						return fmt.Errorf("the subscriber of %s was not woken within a minute", qs[i].Name())
					}
				})
			}
			if err := g.Wait(); err != nil {
				t.Error(err)
			}
			pctx, pcancel := context.WithTimeout(ctx, time.Minute)
			defer pcancel()
			if _, err := qs[0].Put(pctx, []byte("served"), queue.PutOptions{}); err != nil {
				t.Fatalf("Put with %d subscribed queues on one client: %v", n, err)
			}
		})
	}
}
