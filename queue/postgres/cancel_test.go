package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestCancelledCallActsOnlyIfItSucceeds: a call whose caller gives up
// while the server runs its statement returns only once the server's
// outcome is known, and says it: an error only if the statement did not
// happen, then or later. (pgx's default closes the connection at once and
// cancels the statement asynchronously, so a statement the cancel cannot
// stop, one that is committing, took effect after its call had returned
// an error: a renewal changed the receipt its caller kept, a Get hid
// messages nobody held, a Put stored a message its producer was told
// failed.)
//
// The server of the test's own names a synchronous standby that never
// comes, so every commit that waits for it waits until it is cancelled,
// and a commit's wait cannot be undone: the transaction has committed
// locally (PostgreSQL warns so) as with a slow standby or WAL flush. The
// queue handle the test prepares with sets synchronous_commit=local (in
// options=) and does not wait.
func TestCancelledCallActsOnlyIfItSucceeds(t *testing.T) {
	srv := pgtest.StartServer(t, "synchronous_standby_names=nobody")
	schema := pgtest.NewSchemaName()
	ctx := context.Background()
	open := func(name, extra string) *queue.Queue {
		t.Helper()
		q, err := queue.Open(ctx, srv.URL+"&queue="+name+"&schema="+schema+extra)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	admin, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// cancelled runs call on a context it cancels once call's commit
	// waits for the standby, and returns call's error once no commit
	// waits any more.
	cancelled := func(call func(context.Context) error) error {
		t.Helper()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- call(cctx) }()
		syncWaits := func() int {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		waitFor(t, hang, "the call's commit to wait for the standby", func() bool { return syncWaits() > 0 })
		cancel()
		err := <-errc
		waitFor(t, hang, "no commit to wait for the standby", func() bool { return syncWaits() == 0 })
		t.Logf("the cancelled call returned %v", err)
		return err
	}
	// stored tells a message that exists from one that is gone.
	stored := func(q *queue.Queue, id string) bool {
		t.Helper()
		_, err := q.UpdateVisibility(ctx, id, "0000000000000000", 0)
		switch {
		case errors.Is(err, queue.ErrReceiptMismatch):
			return true
		case errors.Is(err, queue.ErrNotFound):
			return false
		}
		t.Fatalf("UpdateVisibility with a receipt nobody has: %v", err)
		return false
	}
	// A server setting goes in options (a bare synchronous_commit= is
	// refused, as every parameter neither adaptq's nor pgx's is).
	const local = "&options=-c%20synchronous_commit%3Dlocal"
	// held puts a message through q and gets it.
	held := func(t *testing.T, q *queue.Queue) *queue.Message {
		t.Helper()
		if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		ms, err := q.Get(ctx, 1, time.Hour)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Get: %d, %v", len(ms), err)
		}
		return ms[0]
	}

	t.Run("Put", func(t *testing.T) {
		prep := open("put", local)
		q := open("put", "")
		var id string
		err := cancelled(func(ctx context.Context) (err error) {
			id, err = q.Put(ctx, []byte("x"), queue.PutOptions{})
			return err
		})
		n, cerr := prep.Count(ctx)
		if cerr != nil {
			t.Fatal(cerr)
		}
		if err != nil && n != 0 {
			t.Fatalf("a Put returned %v, and its message is stored (Count = %d)", err, n)
		}
		if err == nil && (n != 1 || !stored(prep, id)) {
			t.Fatalf("a Put returned id %s; Count = %d", id, n)
		}
	})
	t.Run("Get", func(t *testing.T) {
		prep := open("get", local)
		q := open("get", "")
		if _, err := prep.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		var ms []*queue.Message
		err := cancelled(func(ctx context.Context) (err error) {
			ms, err = q.Get(ctx, 1, time.Hour)
			return err
		})
		visible, perr := prep.Peek(ctx, 1)
		if perr != nil {
			t.Fatal(perr)
		}
		if err != nil && len(visible) != 1 {
			t.Fatalf("a Get returned %v, and hid the message, which nobody holds now", err)
		}
		if err == nil && (len(ms) != 1 || len(visible) != 0) {
			t.Fatalf("a Get returned %d messages; %d still visible", len(ms), len(visible))
		}
	})
	t.Run("UpdateVisibility", func(t *testing.T) {
		prep := open("renew", local)
		q := open("renew", "")
		m := held(t, prep)
		var nr string
		err := cancelled(func(ctx context.Context) (err error) {
			nr, err = q.UpdateVisibility(ctx, m.ID, m.PopReceipt, time.Hour)
			return err
		})
		receipt := m.PopReceipt // what the caller holds now
		if err == nil {
			receipt = nr
		}
		if derr := prep.Delete(ctx, m.ID, receipt); derr != nil {
			t.Fatalf("an UpdateVisibility returned %v; the delete with the receipt the caller holds then failed: %v", err, derr)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		prep := open("delete", local)
		q := open("delete", "")
		m := held(t, prep)
		err := cancelled(func(ctx context.Context) error { return q.Delete(ctx, m.ID, m.PopReceipt) })
		if s := stored(prep, m.ID); s != (err != nil) {
			t.Fatalf("a Delete returned %v; the message stored: %v", err, s)
		}
	})
	t.Run("StoppedByTheCancel", func(t *testing.T) {
		// A statement the cancel reaches while it waits for a lock stops:
		// the call fails, as the caller's context error, and nothing
		// happens once the lock goes.
		prep := open("stopped", local)
		q := open("stopped", "")
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{schema, "messages"}.Sanitize()+` IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := q.Put(cctx, []byte("x"), queue.PutOptions{})
			errc <- err
		}()
		c, err := pgx.Connect(ctx, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		waitFor(t, hang, "the Put to wait for the lock", func() bool {
			var n int
			err := c.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass`,
				pgx.Identifier{schema, "messages"}.Sanitize()).Scan(&n)
			return err == nil && n > 0
		})
		cancel()
		err = <-errc
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("a Put cancelled while it waited for a lock returned %v, want context.Canceled", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := prep.Count(ctx); err != nil || n != 0 {
			t.Fatalf("after a Put that failed, Count = %d (%v), want 0", n, err)
		}
	})
}
