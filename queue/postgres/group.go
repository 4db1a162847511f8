package postgres

import (
	"context"
	"time"

	"github.com/adaptq/adaptq/queue/driver"
)

// maxGroupReceipts caps the receipts one grouped delete statement carries.
const maxGroupReceipts = 1024

// groupTimeout bounds a grouped delete statement, which runs on behalf of
// several callers and so under none of their contexts.
const groupTimeout = 30 * time.Second

// deleteGroup shares delete statements between concurrent DeleteBatch
// calls of one queue in a process (group commit): while a statement is on
// its way, the calls that arrive wait, and the caller whose statement
// returns sends theirs together in the next one. Each call still returns
// only once its messages' deletion has committed, and one alone is sent at
// once; under load, one commit (one WAL flush, one counter update) serves
// several batches, as River's completer serves many jobs.
type deleteGroup struct {
	mu      chan struct{} // a one-slot lock: held while a leader runs
	pending chan *delReq
}

type delReq struct {
	receipts []driver.Receipt
	res      []error
	err      error
	done     chan struct{}
}

func newDeleteGroup() *deleteGroup {
	return &deleteGroup{mu: make(chan struct{}, 1), pending: make(chan *delReq, 4096)}
}

// do deletes receipts through run, alone or with other callers' receipts.
func (g *deleteGroup) do(ctx context.Context, receipts []driver.Receipt, run func(context.Context, []driver.Receipt) ([]error, error)) ([]error, error) {
	r := &delReq{receipts: receipts, done: make(chan struct{})}
	select {
	case g.pending <- r:
	default:
		// The queue of waiting calls is full: go alone.
		return run(ctx, receipts)
	}
	for {
		select {
		case <-r.done:
			return r.res, r.err
		case g.mu <- struct{}{}:
			// Leader: send what is pending (ours among it, unless a leader
			// before us took it), then hand over.
			g.lead(ctx, run)
			<-g.mu
		case <-ctx.Done():
			// The delete may still happen, as when a reply is lost.
			return nil, ctx.Err()
		}
	}
}

// lead sends every pending request in statements of up to
// maxGroupReceipts receipts.
func (g *deleteGroup) lead(ctx context.Context, run func(context.Context, []driver.Receipt) ([]error, error)) {
	for {
		var batch []*delReq
		n := 0
	collect:
		for n < maxGroupReceipts {
			select {
			case r := <-g.pending:
				batch = append(batch, r)
				n += len(r.receipts)
			default:
				break collect
			}
		}
		if len(batch) == 0 {
			return
		}
		all := batch[0].receipts
		if len(batch) > 1 {
			all = make([]driver.Receipt, 0, n)
			for _, r := range batch {
				all = append(all, r.receipts...)
			}
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
		res, err := run(sctx, all)
		cancel()
		off := 0
		for _, r := range batch {
			if err != nil {
				r.err = err
			} else {
				r.res = res[off : off+len(r.receipts) : off+len(r.receipts)]
			}
			off += len(r.receipts)
			close(r.done)
		}
	}
}
