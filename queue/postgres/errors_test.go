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
