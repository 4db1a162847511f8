package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// Calls-per-message targets: put + get/32 + delete per message where each
// delete is a call (Azure), put + get/32 + batch-delete/32 where the driver
// deletes in batches.
const (
	AzureLikeCallsTarget = 2.05
	BatchCallsTarget     = 1.1
)

// noBatch is a driver wrapper that says it has no batch delete: how Azure's
// driver looks to the listener and the meter (one billed Delete per
// message).
type noBatch struct{ driver.Queue }

func (n noBatch) Features() driver.Features {
	f := n.Queue.Features()
	f.BatchDelete = false
	return f
}

const callsTasks = 4

func callsPerMessage(ctx context.Context, e *Env, s *Section) error {
	n := e.Sizes.Calls
	s.how("The cost meter (`queue/meter`) wraps the driver and counts every call. %s messages are put through it "+
		"(8 producers), then the listener (%d tasks, %d handler slots each, no-op handler) drains the backlog: a consumer "+
		"that always finds a full batch, i.e. at saturation. The figure is billed calls ÷ messages deleted, puts "+
		"included, counted until the listener has shut down (its last empty gets included). **Azure-like**: a wrapper "+
		"says the driver has no batch delete, so each delete is its own call, as on Azure Queue Storage. "+
		"Arithmetic: 1 put + 1/32 get + 1 delete = 2.031; with batch deletes 1 + 1/32 + 1/32 = 1.063.",
		commas(int64(n)), callsTasks, listenerSlotsPerTask)
	type backend struct {
		name string
		open func(opts ...queue.Option) (*queue.Queue, func(), error)
		body []byte
	}
	drivers := []backend{
		{"memory", func(opts ...queue.Option) (*queue.Queue, func(), error) {
			q, err := memory.NewStore().Queue("calls", opts...)
			return q, func() {}, err
		}, smallBody},
		{"SQLite", func(opts ...queue.Option) (*queue.Queue, func(), error) {
			dir, err := e.tempDir("calls")
			if err != nil {
				return nil, nil, err
			}
			db, err := sqlite.Open(filepath.Join(dir, "calls.db"))
			if err != nil {
				return nil, nil, err
			}
			q, err := db.Queue("calls", opts...)
			if err != nil {
				db.Close()
				return nil, nil, err
			}
			return q, func() { db.Close() }, nil
		}, jsonBody},
	}
	for _, d := range drivers {
		for _, azure := range []bool{true, false} {
			m := meter.New(0)
			opts := []queue.Option{queue.WithObserver(m)}
			if azure {
				opts = append(opts, queue.WithWrapper(func(d driver.Queue) driver.Queue { return noBatch{d} }))
			}
			q, closeFn, err := d.open(opts...)
			if err != nil {
				return err
			}
			snap, err := meteredDrain(ctx, q, m, n, d.body)
			closeFn()
			if err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
			cpm := snap.CallsPerMessage()
			row := Row{Figure: fmt.Sprintf("%.3f calls/message", cpm), Note: breakdown(snap)}
			if azure {
				row.What = fmt.Sprintf("%s driver, Azure-like (no batch delete): put + get/32 + delete", d.name)
				row.Target = fmt.Sprintf("≤ %.2f", AzureLikeCallsTarget)
				row.Holds = verdict(cpm <= AzureLikeCallsTarget)
			} else {
				row.What = fmt.Sprintf("%s driver, batch delete: put + get/32 + delete/32", d.name)
				row.Target = fmt.Sprintf("≤ %.1f", BatchCallsTarget)
				row.Holds = verdict(cpm <= BatchCallsTarget)
			}
			e.logf("calls: %s", row.What+": "+row.Figure)
			s.add(row)
		}
	}
	s.note("At the seed's price ($%.2f per 10,000 calls) 2.031 calls per message is $%.2f per million messages, 1.063 is $%.2f.",
		meter.DefaultPricePer10k, meter.CostOf(2_031_250, meter.DefaultPricePer10k), meter.CostOf(1_062_500, meter.DefaultPricePer10k))
	return nil
}

// meteredDrain puts n messages through a meter and drains them with the
// listener, and returns the meter's counts.
func meteredDrain(ctx context.Context, mq *queue.Queue, m *meter.Meter, n int, body []byte) (meter.Snapshot, error) {
	if err := fillParallel(ctx, mq, n, 8, body); err != nil {
		return meter.Snapshot{}, err
	}
	_, _, err := drainListener(ctx, mq, n, noop, listener.Options{Tasks: callsTasks, Concurrency: callsTasks * listenerSlotsPerTask}, 10*time.Minute)
	if err != nil {
		return meter.Snapshot{}, err
	}
	snap := m.Snapshot()
	if snap.MessagesDeleted != int64(n) || snap.MessagesPut != int64(n) {
		return snap, fmt.Errorf("put %d, deleted %d of %d", snap.MessagesPut, snap.MessagesDeleted, n)
	}
	if snap.TotalErrors() > 0 {
		return snap, fmt.Errorf("%d calls failed", snap.TotalErrors())
	}
	return snap, nil
}

// breakdown lists calls per message by kind.
func breakdown(s meter.Snapshot) string {
	var parts []string
	for _, k := range meter.Kinds() {
		if c := s.Calls[k]; c > 0 {
			parts = append(parts, fmt.Sprintf("%s %.4f", k, float64(c)/float64(s.MessagesDeleted)))
		}
	}
	return "per message: " + strings.Join(parts, ", ")
}
