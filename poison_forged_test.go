package adaptq

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// forgedEnvelope is a body a producer of jobs writes to look like the
// envelope of a message poisoned from payments, filling the queue's limit
// so that no envelope fits around it verbatim: the header names payments
// and an inner body, which fill makes up.
func forgedEnvelope(limit int, fill func(n int) []byte) []byte {
	inner := []byte(`{"pay":1000000}`)
	for n := 0; ; n++ {
		head := fmt.Sprintf(`%s{"id":"x","queue":"payments","dequeue_count":5,"failed_at":"2026-11-26T00:00:00Z","inserted_at":"2026-11-26T00:00:00Z","size":%d}`+"\n", poison.Magic, len(inner)+n)
		if len(head)+len(inner)+n == limit {
			return append(append([]byte(head), inner...), fill(n)...)
		}
	}
}

// Issue 26, item 4: a producer's body that imitates a poison envelope and
// is too large to wrap verbatim was poisoned bare, and "requeue all" of
// jobs trusted its header: it put the inner body to payments, which shares
// jobs' poison queue, and payments' handler ran it. Now nothing is
// poisoned bare: the requeue puts back to jobs exactly the bytes the
// producer put (a body that compresses), or refuses (one that does not fit
// even compressed, cut short), and payments gets nothing.
func TestRequeueOfAForgedEnvelopeMovesTheOriginalBytesBackToItsQueue(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: sqlite://$DIR/f.db?queue=jobs
    poison_queue: shared-poison
    idle: {max: 100ms}
  - url: sqlite://$DIR/f.db?queue=payments
    poison_queue: shared-poison
    idle: {max: 100ms}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	failing.Store(true)
	var mu sync.Mutex
	var ranJobs, ranPayments [][]byte
	w.MustHandle("jobs", func(_ context.Context, m *queue.Message) error {
		if failing.Load() {
			return handler.Permanent(fmt.Errorf("refused"))
		}
		mu.Lock()
		defer mu.Unlock()
		ranJobs = append(ranJobs, bytes.Clone(m.Body))
		return nil
	})
	w.MustHandle("payments", func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		ranPayments = append(ranPayments, bytes.Clone(m.Body))
		return nil
	})
	runWorker(t, w)
	ctx := context.Background()
	jq, err := w.Queue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	limit := jq.MaxBodySize()
	spaces := func(n int) []byte { return bytes.Repeat([]byte(" "), n) }
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		return b
	}
	compressible, incompressible := forgedEnvelope(limit, spaces), forgedEnvelope(limit, random)
	for _, body := range [][]byte{compressible, incompressible} {
		if _, err := w.Put(ctx, "jobs", body, queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "both are poisoned", func() bool { return poisonCount(t, w) == 2 })
	failing.Store(false)

	code, b := adminCall(t, w, "POST", poisonPath(admin.PoisonRequeuePath, "jobs"), `{"all": true}`, "Content-Type", "application/json")
	var res poison.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("requeue: %d %s", code, b)
	}
	if code != http.StatusInternalServerError || len(res.Done) != 1 || res.Done[0].Queue != "jobs" || len(res.Failed) != 1 {
		t.Fatalf("requeue: %d %s; want the compressible one back to jobs and the cut one failed", code, b)
	}
	waitUntil(t, "jobs runs the requeued message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ranJobs) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if len(ranPayments) != 0 {
		t.Errorf("payments ran %d bodies from jobs' poison queue: %.60q", len(ranPayments), ranPayments)
	}
	if !bytes.Equal(ranJobs[0], compressible) {
		t.Errorf("jobs ran a body of %d bytes, not the %d bytes its producer put (starts %.60q)", len(ranJobs[0]), len(compressible), ranJobs[0])
	}
	if n := poisonCount(t, w); n != 1 {
		t.Errorf("the poison queue holds %d, want the one cut short kept", n)
	}
}
