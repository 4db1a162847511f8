package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/adaptq/adaptq/queue/driver"
)

// TooManyConnectionsBackoff is the retry hint given with SQLSTATE 53300
// (too_many_connections): the server is at max_connections and a retry
// within milliseconds would only add to the storm.
const TooManyConnectionsBackoff = time.Second

// ShutdownBackoff is the retry hint for a server that is shutting down or
// starting up (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
// cannot_connect_now): a restart or a failover takes seconds.
const ShutdownBackoff = 2 * time.Second

// transientCodes are the SQLSTATEs a retry may cure.
var transientCodes = map[string]time.Duration{
	"40001": 0, // serialization_failure
	"40P01": 0, // deadlock_detected
	"55P03": 0, // lock_not_available
	"57014": 0, // query_canceled (statement_timeout; a cancelled context is not transient, checked first)
	"57P01": ShutdownBackoff,
	"57P02": ShutdownBackoff,
	"57P03": ShutdownBackoff,
	"53300": TooManyConnectionsBackoff, // too_many_connections
	"53400": TooManyConnectionsBackoff, // configuration_limit_exceeded
	"53200": time.Second,               // out_of_memory
	"58000": 0,                         // system_error
	"XX000": 0,                         // internal_error (a retry on another backend may pass)
}

// classify says whether a retry of a call that failed with err may succeed:
// a lost or refused connection, a serialization failure, a deadlock, an
// administrator's shutdown, too many connections. A cancelled context is
// not (the caller gave up); a closed DB is not.
func classify(err error) (bool, time.Duration) {
	if err == nil || errors.Is(err, context.Canceled) {
		return false, 0
	}
	if errors.Is(err, driver.ErrClosed) {
		return false, 0
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if after, ok := transientCodes[pe.Code]; ok {
			return true, after
		}
		// Class 08: connection exceptions.
		if strings.HasPrefix(pe.Code, "08") {
			return true, 0
		}
		return false, 0
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true, 0
	}
	if t, after := driver.DefaultClassify(err); t {
		return true, after
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true, 0
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true, 0
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true, 0
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true, 0
	}
	// A connection that died under a statement: the server closed it
	// (EOF) or pgx closed it after a failed read or write.
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return true, 0
	}
	return false, 0
}

// unanswered makes the error of a put's statement, sent on a connection
// the call holds, whose context ended and whose server did not answer the
// cancel request within cancelWait (pgx then drops the connection and
// returns the context's bare error, where an answered cancel is SQLSTATE
// 57014 and a statement never sent is pgconn's SafeToRetry) say what it
// is: the statement may have run and committed, so the error is transient
// ("may be stored"), not the context's own, which says nothing was
// written.
func unanswered(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || pgconn.SafeToRetry(err) {
		return err
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return err
	}
	return driver.Transient(fmt.Errorf("the server did not answer the cancel of the statement within %s: the connection was dropped and the statement's outcome is unknown (%v)", cancelWait, err), 0)
}

// ended makes the error of a statement the server stopped because the
// caller's context ended (cancelOnServer: SQLSTATE 57014) say so, as the
// context's error: errors.Is(err, context.Canceled) holds, and the call is
// not transient (the caller gave up).
func ended(ctx context.Context, err error) error {
	var pe *pgconn.PgError
	if err == nil || ctx.Err() == nil || !errors.As(err, &pe) || pe.Code != "57014" {
		return err
	}
	return fmt.Errorf("%w (%w)", ctx.Err(), err)
}
