package adaptq

import (
	"context"
	"fmt"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// ErrNoQueue: the worker has no queue of that name (admin.ErrNoQueue: a poison
// route answers 404).
var ErrNoQueue = admin.ErrNoQueue

// poisonOf finds the named queue while the worker runs.
func (w *Worker) poisonOf(queueName string) (*workerQueue, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wq := range w.queues {
		if wq.name == queueName {
			return wq, nil
		}
	}
	if !w.running {
		return nil, fmt.Errorf("queue %q: %w", queueName, ErrNotRunning)
	}
	return nil, fmt.Errorf("%w: %q is not configured", ErrNoQueue, queueName)
}

// PoisonList returns up to limit messages (0: poison.DefaultLimit) of the
// named queue's poison queue after the cursor after ("" for the first
// page), oldest first, without their bodies. It only peeks, with backend
// calls bounded by limit whatever the poison queue holds: see poison.List
// for what each backend shows.
func (w *Worker) PoisonList(ctx context.Context, queueName, after string, limit int) (admin.PoisonPage, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return admin.PoisonPage{}, err
	}
	w.poisonMu.Lock()
	defer w.poisonMu.Unlock()
	p, err := poison.List(ctx, wq.poison, after, limit)
	return admin.PoisonPage{Queue: wq.name, PoisonQueue: wq.poison.Name(), Page: p}, err
}

// PoisonPeek returns up to n (1..32) messages of the named queue's poison
// queue, most recently poisoned first, without bodies, with one peek that
// hides nothing: for a page that refreshes itself. See poison.Peek.
func (w *Worker) PoisonPeek(ctx context.Context, queueName string, n int) ([]poison.Message, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return nil, err
	}
	return poison.Peek(ctx, wq.poison, n)
}

// PoisonMessage returns the message of the named queue's poison queue whose
// poison id, or else original id, is id, with its body.
func (w *Worker) PoisonMessage(ctx context.Context, queueName, id string) (poison.Message, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return poison.Message{}, err
	}
	w.poisonMu.Lock()
	defer w.poisonMu.Unlock()
	return poison.Find(ctx, wq.poison, id)
}

// PoisonRequeue puts the selected messages of the named queue's poison
// queue back to the queues they were poisoned from (a bare message, whose
// queue is unknown, to the named queue), then deletes them from the poison
// queue, and pulls those queues' push triggers. A message whose envelope
// names a queue this worker does not run, or one whose poison queue is
// another (a queue of the same name on another backend is another: see
// queue.Queue.SameQueue), stays, listed in Failed.
func (w *Worker) PoisonRequeue(ctx context.Context, queueName string, sel poison.Selection) (poison.Result, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return poison.Result{}, err
	}
	dest := func(name string) (*queue.Queue, error) {
		if name == "" || name == wq.name {
			return wq.q, nil
		}
		// Anyone who can write to the poison queue can name any queue in
		// an envelope: only a queue that poisons onto this same poison
		// queue can be where the message came from.
		other, err := w.poisonOf(name)
		if err != nil {
			return nil, fmt.Errorf("it was poisoned from queue %q, which this worker does not run", name)
		}
		// Two backends may each have a poison queue of this name: the
		// backend's own identity of the queue decides, never the name.
		if other.poison == nil || !other.poison.SameQueue(wq.poison) {
			return nil, fmt.Errorf("its envelope names queue %q, whose poison queue is not this %s: refused", name, wq.poison.Name())
		}
		return other.q, nil
	}
	w.poisonMu.Lock()
	res, err := poison.Requeue(ctx, wq.poison, dest, sel)
	w.poisonMu.Unlock()
	woken := map[string]bool{}
	for _, d := range res.Done {
		if !d.Duplicate && !woken[d.Queue] {
			woken[d.Queue] = true
			_ = w.Trigger(d.Queue)
		}
	}
	return res, err
}

// PoisonPurge deletes the selected messages of the named queue's poison
// queue.
func (w *Worker) PoisonPurge(ctx context.Context, queueName string, sel poison.Selection) (poison.Result, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return poison.Result{}, err
	}
	w.poisonMu.Lock()
	defer w.poisonMu.Unlock()
	return poison.Purge(ctx, wq.poison, sel)
}

// PoisonQueue returns the named queue's poison queue, metered, while the
// worker runs (the status page peeks at it).
func (w *Worker) PoisonQueue(queueName string) (*queue.Queue, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return nil, err
	}
	return wq.poison, nil
}
