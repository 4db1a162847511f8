package adaptqtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/poison"
)

// Scheme is the URL scheme of a kit's queues, adaptqtest://KIT/NAME: what
// NewWorker swaps a config's memory://NAME for, so that the worker's queues
// live in the kit's own store, on its clock.
const Scheme = "adaptqtest"

// kits are the open kits, by id.
var (
	kits   sync.Map // string → *Kit
	kitSeq atomic.Uint64
)

func init() {
	queue.Register(Scheme, queue.OpenerFunc(openURL))
}

func openURL(_ context.Context, u *url.URL) (driver.Queue, error) {
	v, ok := kits.Load(u.Host)
	if !ok {
		return nil, fmt.Errorf("%s: %w %q: no open kit %q (the URL is made by NewWorker)", Scheme, queue.ErrInvalidURL, u.String(), u.Host)
	}
	return v.(*Kit).driver(strings.TrimPrefix(u.Path, "/"))
}

// errLostDelete is what a delete lost by LoseDeletes returns.
var errLostDelete = errors.New("adaptqtest: delete lost (LoseDeletes): the message runs again when its visibility timeout ends")

// kitQueue is a queue of the kit's store, seen by the recorder: every call
// counts as activity while it runs, puts and deletes are recorded, and
// deletes may be lost on purpose.
type kitQueue struct {
	driver.Queue
	rec *recorder
}

var _ driver.DepthReader = (*kitQueue)(nil)

func (q *kitQueue) Put(ctx context.Context, body []byte, opts driver.PutOptions) (string, error) {
	defer q.rec.call()()
	id, err := q.Queue.Put(ctx, body, opts)
	if err == nil {
		q.rec.put(q.Name(), id, body)
	}
	return id, err
}

func (q *kitQueue) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	defer q.rec.call()()
	return q.Queue.Get(ctx, n, vis)
}

func (q *kitQueue) Delete(ctx context.Context, id, receipt string) error {
	defer q.rec.call()()
	if q.rec.loseDelete(id) {
		return errLostDelete
	}
	err := q.Queue.Delete(ctx, id, receipt)
	if err == nil {
		q.rec.deleted(id)
	}
	return err
}

func (q *kitQueue) DeleteBatch(ctx context.Context, rs []driver.Receipt) ([]error, error) {
	defer q.rec.call()()
	lost := make([]bool, len(rs))
	keep := make([]driver.Receipt, 0, len(rs))
	for i, r := range rs {
		if lost[i] = q.rec.loseDelete(r.ID); !lost[i] {
			keep = append(keep, r)
		}
	}
	res, err := q.Queue.DeleteBatch(ctx, keep)
	if err != nil {
		return nil, err
	}
	out := make([]error, len(rs))
	j := 0
	for i, r := range rs {
		if lost[i] {
			out[i] = errLostDelete
			continue
		}
		if out[i] = res[j]; out[i] == nil {
			q.rec.deleted(r.ID)
		}
		j++
	}
	return out, nil
}

func (q *kitQueue) UpdateVisibility(ctx context.Context, id, receipt string, d time.Duration) (string, error) {
	defer q.rec.call()()
	return q.Queue.UpdateVisibility(ctx, id, receipt, d)
}

func (q *kitQueue) Peek(ctx context.Context, n int) ([]*driver.Message, error) {
	defer q.rec.call()()
	return q.Queue.Peek(ctx, n)
}

func (q *kitQueue) Count(ctx context.Context) (int, error) {
	defer q.rec.call()()
	return q.Queue.Count(ctx)
}

func (q *kitQueue) Depth(ctx context.Context) (driver.Depth, error) {
	defer q.rec.call()()
	return q.Queue.(driver.DepthReader).Depth(ctx)
}

// Sibling opens another queue of the kit's store (a poison queue), seen
// by the recorder too.
func (q *kitQueue) Sibling(ctx context.Context, name string) (driver.Queue, error) {
	d, err := q.Queue.Sibling(ctx, name)
	if err != nil {
		return nil, err
	}
	return &kitQueue{Queue: d, rec: q.rec}, nil
}

// isPoison reads a poison envelope, if body is one.
func isPoison(id string, body []byte) (poison.Message, bool) {
	if !bytes.HasPrefix(body, []byte(poison.Magic)) {
		return poison.Message{}, false
	}
	pm := poison.Decode(&queue.Message{ID: id, Body: body})
	return pm, pm.Enveloped
}
