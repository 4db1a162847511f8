package azure_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// actAfterCancel is a fault that holds a request until the test says its
// caller gave up (cancelled), then passes it to the server all the same,
// on a connection of its own, as a request already on the wire reaches a
// server after its client hung up, and answers the client if it still
// listens. acted is closed once the server answered.
func actAfterCancel(target string, cancelled <-chan struct{}, acted chan<- struct{}) queuetest.HTTPFault {
	return queuetest.HTTPFault{Name: "act_after_cancel", Do: func(w http.ResponseWriter, r *http.Request, _ func(http.ResponseWriter)) {
		defer close(acted)
		<-cancelled
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequest(r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}}
}

// TestCancelledCallActsOnlyIfItSucceeds: a Delete or an UpdateVisibility
// whose caller gives up while its request is on the wire must not report
// failure and act afterwards: Azure acts on a request it received, whether
// or not its client still listens. The proxy passes the request on only
// after the cancel. A call that returned an error must have left the
// message as it was; one that acted must say so. Before the fix the
// Delete returned "context canceled" and the message was deleted after.
func TestCancelledCallActsOnlyIfItSucceeds(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	proxy := newFaultProxy(t, srv.QueueEndpoint)
	acct := newAccount(t, srv, azure.Config{QueueEndpoint: proxyEndpoint(proxy)})
	name := uniq(t, "cancelled-acts")
	q := openQueue(t, acct, name)
	direct := openQueue(t, newAccount(t, srv, azure.Config{}), name)
	// stored tells whether the message is still there (a receipt nobody
	// has is a mismatch for a stored message, not found for a gone one).
	stored := func(id string) bool {
		_, err := direct.UpdateVisibility(ctx, id, "AgAAAAMAAAAAAAAA", 0)
		switch {
		case errors.Is(err, queue.ErrReceiptMismatch):
			return true
		case errors.Is(err, queue.ErrNotFound):
			return false
		}
		t.Fatalf("UpdateVisibility(%s) with a receipt nobody has: %v", id, err)
		return false
	}
	for _, op := range []string{"delete", "update"} {
		if _, err := q.Put(ctx, []byte(op), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		ms, err := q.Get(ctx, 1, time.Hour)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Get: %d, %v", len(ms), err)
		}
		m := ms[0]
		cancelled, acted := make(chan struct{}), make(chan struct{})
		proxy.Arm(1, actAfterCancel(srv.QueueEndpoint[:len(srv.QueueEndpoint)-len("/"+azuritetest.Account)], cancelled, acted))
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		var receipt string
		go func() {
			var err error
			if op == "delete" {
				err = q.Delete(cctx, m.ID, m.PopReceipt)
			} else {
				receipt, err = q.UpdateVisibility(cctx, m.ID, m.PopReceipt, 0)
			}
			done <- err
		}()
		for { // until the request is at the proxy
			if r, _ := proxy.Counts(); r[op] > 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		close(cancelled)
		err = <-done
		<-acted
		switch op {
		case "delete":
			if gone := !stored(m.ID); err != nil && gone {
				t.Errorf("a Delete that returned %v deleted its message afterwards", err)
			} else if err == nil && !gone {
				t.Error("a Delete that succeeded left its message")
			}
		case "update":
			// The release made the message visible: a Get takes it.
			got, gerr := direct.Get(ctx, 1, time.Hour)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if err != nil && len(got) == 1 {
				t.Errorf("an UpdateVisibility that returned %v released its message afterwards", err)
			} else if err == nil && (len(got) != 1 || receipt == "") {
				t.Errorf("an UpdateVisibility that succeeded (receipt %q) left its message hidden", receipt)
			}
		}
	}
}
