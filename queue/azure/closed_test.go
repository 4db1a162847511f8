package azure_test

// Review of 33691ec (issue 12): tests that fail on the change as committed.

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/meter"
)

// Account.Close's doc: "queues opened on it then return queue.ErrClosed".
// The change removed the account check from the driver's begin (only
// opening and Sweep still call it) and the portable queue knows only its
// own Close, so after Account.Close every call still goes to Azure, and is
// billed.
func TestClosedAccountClosesItsQueues(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	m := meter.New(0)
	q := openQueue(t, acct, "review12-closed-account", queue.WithObserver(m))
	if err := acct.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := q.Put(ctx, []byte("x"), queue.PutOptions{})
	if !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Put after Account.Close: %v, want ErrClosed", err)
	}
	_, err = q.Get(ctx, 1, time.Minute)
	if !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Get after Account.Close: %v, want ErrClosed", err)
	}
	if s := m.Snapshot(); s.Total() != 0 {
		t.Errorf("calls after Account.Close were billed: %d", s.Total())
	}
}

// The portable queue prefixes "azure: OP "NAME": " itself; the driver must
// not (driver package doc). classify still does for an ended context, and
// loadPayload for a bad envelope, so those errors read
// `azure: peek "q": azure: peek "q": …`.
func TestNoDoublePrefix(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	const name = "review12-prefix"
	q := openQueue(t, acct, name)
	raw := rawQueue(t, srv, name)
	bad := base64.StdEncoding.EncodeToString([]byte(`{"adaptq":"claim-check/v1", not json`))
	if _, err := raw.EnqueueMessage(ctx, bad, nil); err != nil {
		t.Fatal(err)
	}
	_, err := q.Peek(ctx, 1)
	if err == nil {
		t.Fatal("Peek of a malformed envelope succeeded")
	}
	if n := strings.Count(err.Error(), "azure: "); n != 1 {
		t.Errorf("Peek error names the driver %d times: %q", n, err)
	}
	// An ended context met inside the driver (after the portable queue's
	// check): retry with ever shorter deadlines until one ends midway.
	for d := 5 * time.Millisecond; d > 0; d /= 2 {
		cctx, cancel := context.WithTimeout(ctx, d)
		_, err := q.Count(cctx)
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "rejected") {
			if n := strings.Count(err.Error(), "azure: "); n != 1 {
				t.Errorf("Count error names the driver %d times: %q", n, err)
			}
			return
		}
	}
	t.Log("no deadline ended inside the driver")
}
