package sqs_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
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

// TestCancelledCallActsOnlyIfItSucceeds: a Delete, DeleteBatch or
// UpdateVisibility whose caller gives up while its request is on the wire
// must not report failure and act afterwards: SQS acts on a request it
// received, whether or not its client still listens. The proxy passes the
// request on only after the cancel. A call that returned an error must
// have left the message as it was; one that acted must say so. Before the
// fix each returned "context canceled" and acted after.
func TestCancelledCallActsOnlyIfItSucceeds(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	proxy := newFaultProxy(t, srv.Endpoint)
	c := newClient(t, srv, sqs.Config{Endpoint: proxy.URL})
	for _, op := range []string{"DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility"} {
		q := openQueue(t, c, "cancelled-"+strings.ToLower(op))
		if _, err := q.Put(ctx, []byte(op), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		m := getOne(t, q)
		cancelled, acted := make(chan struct{}), make(chan struct{})
		proxy.Arm(1, actAfterCancel(srv.Endpoint, cancelled, acted))
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			var err error
			switch op {
			case "DeleteMessage":
				err = q.Delete(cctx, m.ID, m.PopReceipt)
			case "DeleteMessageBatch":
				var res []error
				res, err = q.DeleteBatch(cctx, []queue.Receipt{{ID: m.ID, PopReceipt: m.PopReceipt}})
				err = firstErr(res, err)
			default:
				_, err = q.UpdateVisibility(cctx, m.ID, m.PopReceipt, 0)
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
		err := <-done
		<-acted
		n, cerr := q.Count(ctx)
		if cerr != nil {
			t.Fatal(cerr)
		}
		switch op {
		case "ChangeMessageVisibility":
			got, gerr := q.Get(ctx, 1, time.Hour)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if err != nil && len(got) == 1 {
				t.Errorf("an UpdateVisibility that returned %v released its message afterwards", err)
			} else if err == nil && len(got) != 1 {
				t.Error("an UpdateVisibility that succeeded left its message hidden")
			}
		default:
			if err != nil && n == 0 {
				t.Errorf("a %s that returned %v deleted its message afterwards", op, err)
			} else if err == nil && n != 0 {
				t.Errorf("a %s that succeeded left its message (Count %d)", op, n)
			}
		}
	}
}
