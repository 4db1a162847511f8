package meter_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// The metered queue is a queue: it passes the whole contract.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		c := clock.NewFake(clock.Epoch)
		s := memory.NewStore(memory.WithClock(c))
		m := meter.New(0)
		return &queuetest.Harness{
			NewQueue: func(_ context.Context, name string) (*queue.Queue, error) {
				return s.Queue(name, queue.WithObserver(m))
			},
			Advance: c.Advance,
			Features: driver.Features{
				MaxPeek: queue.MaxPeek, ExactCount: true, BatchDelete: true, Siblings: true, NativeNotify: true,
				Metadata: driver.DefaultMetadataLimits,
			},
		}
	})
}

// noBatch is a driver without batch deletes, as Azure's.
type noBatch struct{ driver.Queue }

func (n noBatch) Features() driver.Features {
	f := n.Queue.Features()
	f.BatchDelete = false
	return f
}

// flaky fails every get with a transient error.
type flaky struct{ driver.Queue }

var errBusy = queue.Transient(errors.New("server busy"), 0)

func (flaky) Get(context.Context, int, time.Duration) ([]*driver.Message, error) { return nil, errBusy }

func TestCountsByKind(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		wrap  func(driver.Queue) driver.Queue
		batch bool
	}{
		{"batch-deleting driver", func(d driver.Queue) driver.Queue { return d }, true},
		{"driver without batch delete", func(d driver.Queue) driver.Queue { return noBatch{d} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := meter.New(0)
			q, err := memory.NewStore().Queue("metered", queue.WithObserver(m), queue.WithWrapper(tc.wrap))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 40; i++ {
				if _, err := q.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var rs []queue.Receipt
			for {
				ms, err := q.Get(ctx, 32, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) == 0 {
					break
				}
				for _, msg := range ms {
					rs = append(rs, queue.Receipt{ID: msg.ID, PopReceipt: msg.PopReceipt})
				}
			}
			// One stale receipt in the batch: billed, not counted as deleted.
			rs = append(rs, queue.Receipt{ID: rs[0].ID, PopReceipt: "stale"})
			if _, err := q.DeleteBatch(ctx, rs); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Count(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Peek(ctx, 1); err != nil {
				t.Fatal(err)
			}
			s := m.Snapshot()
			want := map[meter.Kind]int64{meter.Put: 40, meter.Get: 2, meter.GetEmpty: 1, meter.Count: 1, meter.Peek: 1}
			if tc.batch {
				want[meter.DeleteBatch] = 2 // 41 receipts: one call per 32
			} else {
				want[meter.Delete] = 41
			}
			var total int64
			for _, k := range meter.Kinds() {
				if s.Calls[k] != want[k] {
					t.Errorf("%s calls = %d, want %d", k, s.Calls[k], want[k])
				}
				total += want[k]
			}
			if s.Total() != total {
				t.Errorf("Total = %d, want %d", s.Total(), total)
			}
			if s.MessagesPut != 40 || s.MessagesGot != 40 || s.MessagesDeleted != 40 {
				t.Errorf("messages put/got/deleted = %d/%d/%d, want 40 each", s.MessagesPut, s.MessagesGot, s.MessagesDeleted)
			}
			if got, want := s.CallsPerMessage(), float64(total)/40; got != want {
				t.Errorf("CallsPerMessage = %v, want %v", got, want)
			}
		})
	}
}

func TestRetriesAreBilledAndRejectionsAreNot(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	m := meter.New(0)
	q, _ := store.Queue("retries", queue.WithObserver(m), queue.WithWrapper(func(d driver.Queue) driver.Queue { return flaky{d} }))
	for i := 0; i < 3; i++ {
		if _, err := q.Get(ctx, 32, time.Minute); !queue.IsTransient(err) {
			t.Fatalf("Get = %v, want the transient error", err)
		}
	}
	good, _ := store.Queue("retries", queue.WithObserver(m))
	if _, err := good.Get(ctx, 33, time.Minute); !errors.Is(err, queue.ErrBatchSize) {
		t.Fatal(err)
	}
	if _, err := good.Put(ctx, make([]byte, queue.DefaultMaxBodySize+1), queue.PutOptions{}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatal(err)
	}
	s := m.Snapshot()
	if s.Calls[meter.GetEmpty] != 3 || s.Errors[meter.GetEmpty] != 3 || s.Transient != 3 {
		t.Errorf("failed gets: calls %d, errors %d, transient %d; want 3 each", s.Calls[meter.GetEmpty], s.Errors[meter.GetEmpty], s.Transient)
	}
	if s.Rejected != 2 {
		t.Errorf("Rejected = %d, want 2 (the batch of 33 and the oversized body never reach a backend)", s.Rejected)
	}
	if s.Calls[meter.Put] != 0 || s.Errors[meter.Put] != 0 {
		t.Errorf("oversized put: calls %d, errors %d; want 0, 0", s.Calls[meter.Put], s.Errors[meter.Put])
	}
}

func TestPricing(t *testing.T) {
	// The Best Practices article: one thread polling every second for 22 idle hours makes
	// 79,200 calls a day, "approximately $2.38" a month at $0.01 per 10,000.
	perDay := int64(22 * 60 * 60)
	if perDay != 79200 {
		t.Fatalf("22 h of 1 s polls = %d", perDay)
	}
	if got := meter.CostOf(perDay*30, meter.DefaultPricePer10k); math.Abs(got-2.376) > 1e-9 {
		t.Errorf("monthly cost = %v, want 2.376 ($2.38)", got)
	}
	s := meter.Snapshot{PricePer10k: 0.01}
	s.Calls[meter.GetEmpty] = perDay
	if got := s.MonthlyCost(24 * time.Hour); math.Abs(got-2.376) > 1e-9 {
		t.Errorf("MonthlyCost over one day = %v, want 2.376", got)
	}
	if got := meter.New(0.004).Snapshot().PricePer10k; got != 0.004 {
		t.Errorf("price = %v, want 0.004", got)
	}
	a := meter.Snapshot{MessagesDeleted: 10}
	a.Calls[meter.Put] = 10
	b := a
	b.Calls[meter.Put] = 25
	b.MessagesDeleted = 30
	d := b.Sub(a)
	if d.Calls[meter.Put] != 15 || d.MessagesDeleted != 20 {
		t.Errorf("Sub = %+v", d)
	}
	if !math.IsNaN(meter.Snapshot{}.CallsPerMessage()) {
		t.Error("CallsPerMessage with nothing deleted is not NaN")
	}
}
