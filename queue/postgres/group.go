package postgres

import (
	"context"
	"sync/atomic"
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
// its way, the calls that arrive wait, and one of them then sends all that
// wait together in the next. Each call returns only once its messages'
// deletion has committed, and one alone is sent at once; under load, one
// commit (one WAL flush, one counter update) serves several batches, as
// River's completer serves many jobs.
//
// A caller leads (sends statements) only until its own request is done:
// the requests queued ahead of it, never those that arrive while it
// serves, so no call is held back by others' traffic. A caller whose
// context ends while its request waits withdraws it; once a leader has
// taken it, the caller waits for that statement, so a call that returned
// never acts afterwards. A request holds its caller's receipts, not a
// copy: a leader reads them only once it has taken the request, and the
// caller then waits for the outcome, so they are read only while the
// caller is still in its call.
type deleteGroup struct {
	mu      chan struct{} // a one-slot lock: held while a leader runs
	pending chan *delReq
}

// A delReq's state: waiting in pending, taken by a leader, or withdrawn by
// its caller.
const (
	reqPending int32 = iota
	reqTaken
	reqWithdrawn
)

type delReq struct {
	receipts []driver.Receipt // the caller's: read only while it waits in do
	state    atomic.Int32
	res      []error
	err      error
	done     chan struct{} // closed once res and err are set
}

func (r *delReq) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
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
			// Leader until our own request is done.
			g.lead(ctx, r, run)
			<-g.mu
		case <-ctx.Done():
			if r.state.CompareAndSwap(reqPending, reqWithdrawn) {
				// Never sent, and now never will be.
				return nil, ctx.Err()
			}
			// A leader has taken it: its statement is on its way (bounded
			// by groupTimeout). Wait for the outcome rather than return
			// while the delete may still happen.
			<-r.done
			return r.res, r.err
		}
	}
}

// lead sends the pending requests, oldest first, in statements of up to
// maxGroupReceipts receipts, until own is done.
func (g *deleteGroup) lead(ctx context.Context, own *delReq, run func(context.Context, []driver.Receipt) ([]error, error)) {
	for !own.finished() {
		var batch []*delReq
		n := 0
	collect:
		for n < maxGroupReceipts {
			select {
			case r := <-g.pending:
				if !r.state.CompareAndSwap(reqPending, reqTaken) {
					continue // withdrawn by its caller
				}
				batch = append(batch, r)
				n += len(r.receipts)
			default:
				break collect
			}
		}
		if len(batch) == 0 {
			return // own was withdrawn (never: we are its caller) or taken
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
