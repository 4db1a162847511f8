package admin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
)

// fakeQueue is the one queue fakeWorker runs.
const fakeQueue = "admin-q"

// fakeWorker is the least a Worker can be: one queue, fakeQueue, with an
// empty poison queue and nothing else to show. It serves the tests of the
// endpoint's HTTP behaviour (hosts, tokens, sessions, origins, bounds);
// the root package's tests run the same routes on a real worker.
type fakeWorker struct {
	poison *queue.Queue
	// depthErr, when set, is the queue's DepthError in Stats and Scaling.
	depthErr string
}

func newFakeWorker(t *testing.T) *fakeWorker {
	t.Helper()
	pq, err := memory.NewStore().Queue(fakeQueue + "-poison")
	if err != nil {
		t.Fatal(err)
	}
	return &fakeWorker{poison: pq}
}

func (f *fakeWorker) check(name string) error {
	if name != fakeQueue {
		return fmt.Errorf("%w: %q is not configured", ErrNoQueue, name)
	}
	return nil
}

func (f *fakeWorker) Stats(context.Context) Stats {
	return Stats{Queues: []QueueStats{{Name: fakeQueue, DepthError: f.depthErr}}}
}

func (f *fakeWorker) Scaling(context.Context) (Scaling, error) {
	if f.depthErr != "" {
		return Scaling{Queues: []QueueScaling{{Name: fakeQueue, DepthError: f.depthErr}}}, errors.New("depth")
	}
	return Scaling{Queues: []QueueScaling{{Name: fakeQueue}}}, nil
}

func (f *fakeWorker) Readiness() (bool, []string) { return true, []string{fakeQueue + ": ok"} }

func (f *fakeWorker) Trigger(name string) error { return f.check(name) }

func (f *fakeWorker) Metrics() prometheus.Gatherer { return prometheus.NewRegistry() }

func (f *fakeWorker) PoisonList(_ context.Context, name, _ string, _ int) (PoisonPage, error) {
	return PoisonPage{Queue: name, PoisonQueue: f.poison.Name()}, f.check(name)
}

func (f *fakeWorker) PoisonMessage(_ context.Context, name, id string) (poison.Message, error) {
	if err := f.check(name); err != nil {
		return poison.Message{}, err
	}
	return poison.Message{}, fmt.Errorf("poison message %q: %w", id, queue.ErrNotFound)
}

func (f *fakeWorker) PoisonRequeue(_ context.Context, name string, _ poison.Selection) (poison.Result, error) {
	return poison.Result{}, f.check(name)
}

func (f *fakeWorker) PoisonPurge(_ context.Context, name string, _ poison.Selection) (poison.Result, error) {
	return poison.Result{}, f.check(name)
}

func (f *fakeWorker) PoisonQueue(name string) (*queue.Queue, error) { return f.poison, f.check(name) }

// startAdmin serves a fakeWorker's admin endpoint on loopback with the
// given token ("" for none) until the test ends, and returns its address.
func startAdmin(t *testing.T, token string) string {
	t.Helper()
	s, err := Start(newFakeWorker(t), Options{Address: "127.0.0.1:0", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Addr()
}
