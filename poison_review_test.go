package adaptq

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// Anyone who can write to a queue's poison queue can write an envelope
// that names another queue. Requeuing from jobs' poison queue must not put
// a body to payments, whose poison queue is another one: the message could
// not have been poisoned from there, and the operator asked about jobs.
func TestPoisonRequeueRefusesAQueueWithAnotherPoisonQueue(t *testing.T) {
	cfg := testConfig(t, `
queues:
  - url: sqlite://$DIR/p.db?queue=jobs
    idle: {max: 100ms}
  - url: sqlite://$DIR/p.db?queue=payments
    idle: {max: 100ms}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("jobs", func(context.Context, *queue.Message) error { return nil })
	w.MustHandle("payments", func(context.Context, *queue.Message) error { return nil })
	runWorker(t, w)
	wq, err := w.poisonOf("jobs")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	forged, err := poison.Encode(poison.Message{ID: "x", Queue: "payments", DequeueCount: 5, Body: []byte(`{"pay":1000000}`)}, wq.poison.MaxBodySize())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wq.poison.Put(ctx, forged, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := w.PoisonRequeue(ctx, "jobs", poison.Selection{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Done {
		if d.Queue == "payments" {
			t.Fatalf("requeued %+v to payments from jobs' poison queue", d)
		}
	}
	if len(res.Failed) != 1 {
		t.Fatalf("result %+v: want the forged message failed", res)
	}
	if n := poisonCount(t, w); n != 1 {
		t.Fatalf("jobs' poison queue holds %d, want the forged message kept", n)
	}
}

// A bad "after" cursor is a 400 that names the parameter and its value.
func TestPoisonListBadCursorNamesTheParameter(t *testing.T) {
	var failing atomic.Bool
	w, _ := poisonWorker(t, "", &failing)
	code, body := adminCall(t, w, "GET", poisonPath(admin.PoisonPath, "jobs")+"?after=not-a-cursor", "")
	if code != http.StatusBadRequest || !strings.Contains(string(body), `after "not-a-cursor"`) {
		t.Fatalf("%d %q: want 400 naming after and its value", code, body)
	}
}
