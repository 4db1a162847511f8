package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/adaptq/adaptq/queue"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("get: %w", &pgconn.PgError{Code: code}) }
	for _, c := range []struct {
		name      string
		err       error
		transient bool
		after     time.Duration
	}{
		{"serialization failure", pg("40001"), true, 0},
		{"deadlock", pg("40P01"), true, 0},
		{"admin shutdown", pg("57P01"), true, ShutdownBackoff},
		{"cannot connect now", pg("57P03"), true, ShutdownBackoff},
		{"too many connections", pg("53300"), true, TooManyConnectionsBackoff},
		{"connection failure", pg("08006"), true, 0},
		{"unique violation", pg("23505"), false, 0},
		{"syntax error", pg("42601"), false, 0},
		{"connection lost", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, 0},
		{"closed by the server", fmt.Errorf("receive: %w", io.EOF), true, 0},
		{"cannot connect", &pgconn.ConnectError{}, true, 0},
		{"deadline", context.DeadlineExceeded, true, 0},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), false, 0},
		{"closed DB", queue.ErrClosed, false, 0},
		{"contract outcome", queue.ErrReceiptMismatch, false, 0},
	} {
		tr, after := classify(c.err)
		if tr != c.transient || after != c.after {
			t.Errorf("%s: classify = %v, %s; want %v, %s", c.name, tr, after, c.transient, c.after)
		}
	}
	if tr, _ := classify(errors.New("something else")); tr {
		t.Error("an unknown error is transient")
	}
}

// TestEnded: only a statement the server stopped for the caller's ended
// context reads as that context's error; any other outcome is kept.
func TestEnded(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := &pgconn.PgError{Code: "57014"}
	if err := ended(done, stopped); !errors.Is(err, context.Canceled) || !errors.As(err, new(*pgconn.PgError)) {
		t.Errorf("ended(cancelled, 57014) = %v, want context.Canceled wrapping the server's error", err)
	}
	if err := ended(context.Background(), stopped); errors.Is(err, context.Canceled) {
		t.Errorf("ended(live, 57014) = %v: a statement timeout is not the caller's cancel", err)
	}
	other := fmt.Errorf("%w: id 1", queue.ErrReceiptMismatch)
	if err := ended(done, other); err != other {
		t.Errorf("ended(cancelled, %v) = %v, want it unchanged", other, err)
	}
}

// TestTxErrIsTransient: a serialization failure or a deadlock of a
// statement in the caller's transaction (PutTx, DeleteTx in REPEATABLE
// READ or SERIALIZABLE) is what queue.IsTransient sees as transient, so
// the caller's retry of the transaction runs; a constraint violation is
// not; the server's error stays reachable.
func TestTxErrIsTransient(t *testing.T) {
	pq := &pgQueue{db: &DB{}, st: &queueState{name: "jobs"}}
	for _, c := range []struct {
		code      string
		transient bool
	}{{"40001", true}, {"40P01", true}, {"23505", false}} {
		err := pq.txErr("put", &pgconn.PgError{Code: c.code})
		if got := queue.IsTransient(err); got != c.transient {
			t.Errorf("SQLSTATE %s: queue.IsTransient(%v) = %v, want %v", c.code, err, got, c.transient)
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("SQLSTATE %s: the PgError is lost: %v", c.code, err)
		}
	}
}
