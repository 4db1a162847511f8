package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// heldReceipts opens queue name in a schema of its own, puts n messages
// and gets them, returning the driver and one receipt per message.
func heldReceipts(t *testing.T, name string, n int) (*pgQueue, []driver.Receipt) {
	t.Helper()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.URL(t), WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	pq, err := db.queue(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	q := queue.New(pq)
	var rs []driver.Receipt
	for i := range n {
		if _, err := q.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for len(rs) < n {
		ms, err := q.Get(ctx, queue.MaxBatchSize, time.Hour)
		if err != nil || len(ms) == 0 {
			t.Fatalf("Get: %d, %v", len(ms), err)
		}
		for _, m := range ms {
			rs = append(rs, driver.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
	}
	return pq, rs
}

// waitPending waits until the group holds n waiting requests.
func waitPending(t *testing.T, g *deleteGroup, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard only
	for len(g.pending) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait, want %d", len(g.pending), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLeaderServesOnlyWhatWaitedBeforeIt: while a caller's grouped delete
// is on its way, another caller arrives, every time. The first caller
// returns after its own statement; it does not serve the arrivals (defect
// 7 of issue 25: one DeleteBatch served others for 3.7 s while its
// consumer fetched nothing).
func TestLeaderServesOnlyWhatWaitedBeforeIt(t *testing.T) {
	const arrivals = 10
	pq, rs := heldReceipts(t, "leader", arrivals+1)
	g := pq.st.dels
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		runs    int
		others  atomic.Int64
		failure atomic.Value
	)
	// The first caller's statements: each lets one more caller arrive and
	// queue up before it goes.
	first := func(sctx context.Context, batch []driver.Receipt) ([]error, error) {
		runs++
		if runs <= arrivals {
			r := rs[runs]
			wg.Go(func() {
				res, err := g.do(ctx, []driver.Receipt{r}, pq.deleteBatch)
				if err == nil && res[0] != nil {
					err = res[0]
				}
				if err != nil {
					failure.Store(err)
				}
				others.Add(1)
			})
			waitPending(t, g, 1)
		}
		return pq.deleteBatch(sctx, batch)
	}
	res, err := g.do(ctx, rs[:1], first)
	if err != nil || res[0] != nil {
		t.Fatalf("the first DeleteBatch: %v, %v", res, err)
	}
	if runs != 1 {
		t.Errorf("the first caller sent %d statements, want its own only", runs)
	}
	wg.Wait()
	if err, _ := failure.Load().(error); err != nil {
		t.Fatalf("a later caller: %v", err)
	}
	if n, err := pq.Count(ctx); err != nil || n != arrivals-int(others.Load()) {
		t.Fatalf("after %d deletes the queue counts %d (%v), want %d", 1+others.Load(), n, err, arrivals-others.Load())
	}
}

// TestCancelledAfterTakenWaitsForTheStatement: a caller whose request
// another caller's statement carries, and whose context ends meanwhile,
// returns only once that statement is done, with its outcome: a call that
// returned never acts afterwards.
func TestCancelledAfterTakenWaitsForTheStatement(t *testing.T) {
	pq, rs := heldReceipts(t, "taken", 3)
	g := pq.st.dels
	ctx := context.Background()

	// B and C queue behind A; whichever leads next carries both, and its
	// statement waits for gateBC.
	gateBC := make(chan struct{})
	var sent, finished atomic.Bool
	run := func(sctx context.Context, b []driver.Receipt) ([]error, error) {
		if len(b) != 2 {
			return nil, fmt.Errorf("a statement of %d receipts, want B's and C's together", len(b))
		}
		sent.Store(true)
		<-gateBC
		res, err := pq.deleteBatch(sctx, b)
		finished.Store(true)
		return res, err
	}

	// A is on its way, alone, until gateA opens.
	gateA := make(chan struct{})
	aSent := make(chan struct{})
	aDone := make(chan error, 1)
	var first sync.Once
	go func() {
		_, err := g.do(ctx, rs[:1], func(sctx context.Context, b []driver.Receipt) ([]error, error) {
			isA := false
			first.Do(func() { isA = true })
			if !isA {
				return run(sctx, b) // A leads the others too
			}
			close(aSent)
			<-gateA
			return pq.deleteBatch(sctx, b)
		})
		aDone <- err
	}()
	<-aSent

	type outcome struct {
		res      []error
		err      error
		finished bool
	}
	bctx, cancelB := context.WithCancel(ctx)
	cctx, cancelC := context.WithCancel(ctx)
	defer cancelB()
	defer cancelC()
	done := make(chan outcome, 2)
	for i, c := range []context.Context{bctx, cctx} {
		go func() {
			res, err := g.do(c, rs[1+i:2+i], run)
			done <- outcome{res, err, finished.Load()}
		}()
	}
	waitPending(t, g, 2)
	close(gateA)
	for !sent.Load() {
		time.Sleep(time.Millisecond)
	}
	// Both give up while their statement is on its way.
	cancelB()
	cancelC()
	select {
	case o := <-done:
		t.Fatalf("a call returned (%v, %v) while the statement carrying its receipt was still on its way", o.res, o.err)
	case <-time.After(time.Second):
		// A wait, not a measure: a fixed driver never returns here, so
		// only a slow machine could hide the defect, never fail the test.
	}
	close(gateBC)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		o := <-done
		if !o.finished {
			t.Fatalf("a call returned before its statement was done")
		}
		if o.err != nil && !errors.Is(o.err, context.Canceled) {
			t.Fatalf("the outcome: %v", o.err)
		}
	}
	if n, err := pq.Count(ctx); err != nil || n != 0 {
		t.Fatalf("the queue counts %d (%v), want 0", n, err)
	}
}

// TestOneSweepAtATime: while one queue's sweep runs, a call on another
// queue leaves its sweep for later, so sweeps never hold more than one
// connection of the pool; once the first is done, the next call starts it.
func TestOneSweepAtATime(t *testing.T) {
	pq, _ := heldReceipts(t, "sweep-a", 0)
	db := pq.db
	other, err := db.queue(context.Background(), "sweep-b")
	if err != nil {
		t.Fatal(err)
	}
	db.sweepSlot <- struct{}{} // a sweep of another queue runs
	other.kickSweep()
	other.st.sweepMu.Lock()
	started := other.st.sweeping || !other.st.lastSweep.IsZero()
	other.st.sweepMu.Unlock()
	if started {
		t.Fatal("a second sweep started while one ran")
	}
	<-db.sweepSlot
	other.kickSweep()
	deadline := time.Now().Add(time.Minute) // a hang guard only
	for {
		other.st.sweepMu.Lock()
		ran := !other.st.lastSweep.IsZero()
		other.st.sweepMu.Unlock()
		if ran {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sweep started once the slot was free")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWithdrawnReceiptsAreNeverRead: the group holds its callers'
// receipts, not copies (issue 34), and the listener puts its receipt
// slices back in a pool for the next batch once DeleteBatch returns. A
// caller that withdrew (its context ended while its request waited)
// returns at once and may overwrite its slice with other messages'
// receipts; the next leader must skip the request without reading them,
// or it deletes messages nobody asked it to.
func TestWithdrawnReceiptsAreNeverRead(t *testing.T) {
	pq, rs := heldReceipts(t, "withdrawn", 4)
	g := pq.st.dels
	ctx := context.Background()

	// A leads and its statement waits for gateA.
	gateA, aSent, aDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := g.do(ctx, rs[:1], func(sctx context.Context, b []driver.Receipt) ([]error, error) {
			close(aSent)
			<-gateA
			return pq.deleteBatch(sctx, b)
		})
		aDone <- err
	}()
	<-aSent

	// W waits behind A, gives up, and reuses its slice for other receipts.
	buf := []driver.Receipt{rs[1]}
	wctx, cancelW := context.WithCancel(ctx)
	wDone := make(chan error, 1)
	go func() {
		_, err := g.do(wctx, buf, pq.deleteBatch)
		wDone <- err
	}()
	waitPending(t, g, 1)
	cancelW()
	if err := <-wDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the withdrawn call: %v, want context.Canceled", err)
	}
	buf[0] = rs[2]
	close(gateA)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}

	// C leads next and finds W's request still queued.
	var sent [][]driver.Receipt
	res, err := g.do(ctx, rs[3:4], func(sctx context.Context, b []driver.Receipt) ([]error, error) {
		sent = append(sent, append([]driver.Receipt(nil), b...))
		return pq.deleteBatch(sctx, b)
	})
	if err != nil || res[0] != nil {
		t.Fatalf("C's DeleteBatch: %v, %v", res, err)
	}
	if len(sent) != 1 || len(sent[0]) != 1 || sent[0][0] != rs[3] {
		t.Errorf("C's statements carried %v, want C's receipt alone", sent)
	}
	if n, err := pq.Count(ctx); err != nil || n != 2 {
		t.Fatalf("the queue counts %d (%v), want 2: W's message and the one its slice named after it withdrew", n, err)
	}
}
