package adaptq

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// Requeue's Dest trusts an envelope's queue only if that queue poisons onto
// the same poison queue. Two queues on two backends may give their poison
// queues the same name (here two SQLite files, each with a
// "shared-poison"): they are still two poison queues, and an envelope
// written to jobs' one (by whoever can write to it: the check exists for
// them) must not reach payments.
func TestRequeueRefusesAQueueWhosePoisonQueueOnlySharesTheName(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: sqlite://$DIR/jobs.db?queue=jobs
    poison_queue: shared-poison
    idle: {max: 100ms}
  - url: sqlite://$DIR/payments.db?queue=payments
    poison_queue: shared-poison
    idle: {max: 100ms}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var ranPayments atomic.Int32
	w.MustHandle("jobs", func(context.Context, *queue.Message) error { return nil })
	w.MustHandle("payments", func(context.Context, *queue.Message) error { ranPayments.Add(1); return nil })
	runWorker(t, w)
	ctx := context.Background()
	pq, err := w.PoisonQueue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := poison.Encode(poison.Message{ID: "x", Queue: "payments", DequeueCount: 5,
		FailedAt: time.Now(), InsertedAt: time.Now(), Body: []byte(`{"pay":1000000}`)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pq.Put(ctx, forged, queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
		t.Fatal(err)
	}
	code, b := adminCall(t, w, "POST", poisonPath(admin.PoisonRequeuePath, "jobs"), `{"all": true}`, "Content-Type", "application/json")
	var res poison.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("requeue: %d %s", code, b)
	}
	if len(res.Done) != 0 || len(res.Failed) != 1 {
		t.Errorf("requeue: %d %s; want the message refused: payments' poison queue is another", code, b)
	}
	pay, err := w.Queue("payments")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "payments is empty", func() bool {
		n, err := pay.Count(ctx)
		return err == nil && n == 0
	})
	if n := ranPayments.Load(); n != 0 {
		t.Errorf("payments ran %d messages from jobs' poison queue", n)
	}
}
