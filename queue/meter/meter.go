// Package meter counts and prices every call adaptq makes to a queue
// backend. Each call is a billed storage transaction (the Best Practices article: "a store
// transaction is a request from a user application to add, read, update, or
// delete store data"), a get that comes back empty included, and a retried
// call is billed again. A Meter is a queue.Observer: open queues with
// queue.WithObserver(m) and read Snapshots; the worker, the CLI's stats,
// and the simulator all read the same numbers.
package meter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// DefaultPricePer10k is the price of 10,000 storage transactions in US
// dollars (the Best Practices article: "the cost of storage transactions was $0.01 per 10,000
// transactions").
const DefaultPricePer10k = 0.01

// HoursPerMonth is the month the Best Practices article prices by: 30 days.
const HoursPerMonth = 30 * 24

// Kind is the kind of a backend call.
type Kind int

// The kinds of calls. Get counts gets that returned messages; GetEmpty
// those that returned none. DeleteBatch is one call that deleted many,
// PutBatch one that stored many.
const (
	Put Kind = iota
	Get
	GetEmpty
	Delete
	DeleteBatch
	Update
	Peek
	Count
	Clear
	PutBatch
	NumKinds
)

var kindNames = [NumKinds]string{"put", "get", "get_empty", "delete", "delete_batch", "update", "peek", "count", "clear", "put_batch"}

// String is the kind's stable name, as used in logs and reports.
func (k Kind) String() string {
	if k >= 0 && k < NumKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Kinds lists every kind in order.
func Kinds() []Kind {
	ks := make([]Kind, NumKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// Meter accumulates counts. One Meter may wrap many queues (to total a
// worker) and is safe for concurrent use.
type Meter struct {
	price atomic.Uint64 // math.Float64bits of the price per 10,000 calls
	calls [NumKinds]atomic.Int64
	errs  [NumKinds]atomic.Int64
	trans atomic.Int64
	extra atomic.Int64
	rej   atomic.Int64
	put   atomic.Int64
	got   atomic.Int64
	del   atomic.Int64
}

// New returns a meter that prices calls at pricePer10k dollars per 10,000
// (DefaultPricePer10k if pricePer10k is 0).
func New(pricePer10k float64) *Meter {
	if pricePer10k == 0 {
		pricePer10k = DefaultPricePer10k
	}
	m := &Meter{}
	m.price.Store(math.Float64bits(pricePer10k))
	return m
}

// SetPrice prices the calls at pricePer10k dollars per 10,000 from now on;
// 0 means they are free (a backend that does not bill per call). Costs
// are computed from the price at the time of a Snapshot.
func (m *Meter) SetPrice(pricePer10k float64) { m.price.Store(math.Float64bits(pricePer10k)) }

// Snapshot is the meter's counts at one moment.
type Snapshot struct {
	// Calls counts backend calls by kind, failed ones included.
	Calls [NumKinds]int64
	// Errors counts calls that returned an error, by kind.
	Errors [NumKinds]int64
	// Transient counts errors that queue.IsTransient classifies as
	// retryable.
	Transient int64
	// Rejected counts calls the driver refused before reaching the backend
	// (invalid arguments, a closed queue, a cancelled context). They are not
	// billed and not in Calls.
	Rejected int64
	// ExtraUnits counts the requests billed beyond one per call, where a
	// backend bills by payload (queue.Call.Units: SQS bills each 64 KiB as
	// one request). Cost prices Total plus ExtraUnits.
	ExtraUnits int64
	// MessagesPut, MessagesGot and MessagesDeleted count messages, not
	// calls: one Get may return 32.
	MessagesPut, MessagesGot, MessagesDeleted int64
	// PricePer10k is the price the meter was given.
	PricePer10k float64
}

// Snapshot reads the counters. Counters are read one by one, so a snapshot
// taken while calls run may be off by the calls in flight.
func (m *Meter) Snapshot() Snapshot {
	s := Snapshot{PricePer10k: math.Float64frombits(m.price.Load())}
	for k := range s.Calls {
		s.Calls[k] = m.calls[k].Load()
		s.Errors[k] = m.errs[k].Load()
	}
	s.Transient = m.trans.Load()
	s.ExtraUnits = m.extra.Load()
	s.Rejected = m.rej.Load()
	s.MessagesPut = m.put.Load()
	s.MessagesGot = m.got.Load()
	s.MessagesDeleted = m.del.Load()
	return s
}

// Total is the number of billed calls.
func (s Snapshot) Total() int64 {
	var t int64
	for _, c := range s.Calls {
		t += c
	}
	return t
}

// Gets is the number of get calls, empty or not.
func (s Snapshot) Gets() int64 { return s.Calls[Get] + s.Calls[GetEmpty] }

// TotalErrors is the number of calls that failed.
func (s Snapshot) TotalErrors() int64 {
	var t int64
	for _, c := range s.Errors {
		t += c
	}
	return t
}

// Billed is the number of billed requests: Total, plus the requests a
// backend that bills by payload counts beyond one per call.
func (s Snapshot) Billed() int64 { return s.Total() + s.ExtraUnits }

// Cost is the price of the calls in dollars.
func (s Snapshot) Cost() float64 { return CostOf(s.Billed(), s.PricePer10k) }

// CallsPerMessage is billed calls per message deleted (processed): seed
// 002's measure of efficiency. It is NaN before any message was deleted.
func (s Snapshot) CallsPerMessage() float64 {
	if s.MessagesDeleted == 0 {
		return math.NaN()
	}
	return float64(s.Total()) / float64(s.MessagesDeleted)
}

// Sub returns the counts accumulated between o and s (s minus o).
func (s Snapshot) Sub(o Snapshot) Snapshot {
	d := s
	for k := range d.Calls {
		d.Calls[k] -= o.Calls[k]
		d.Errors[k] -= o.Errors[k]
	}
	d.Transient -= o.Transient
	d.ExtraUnits -= o.ExtraUnits
	d.Rejected -= o.Rejected
	d.MessagesPut -= o.MessagesPut
	d.MessagesGot -= o.MessagesGot
	d.MessagesDeleted -= o.MessagesDeleted
	return d
}

// MonthlyCost extrapolates the calls of s, made over d, to a 30-day month.
func (s Snapshot) MonthlyCost(d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	perHour := float64(s.Billed()) / d.Hours()
	return CostOf(int64(math.Round(perHour*HoursPerMonth)), s.PricePer10k)
}

// CostOf prices calls at pricePer10k dollars per 10,000.
func CostOf(calls int64, pricePer10k float64) float64 {
	return float64(calls) / 10000 * pricePer10k
}

// Map returns the calls by kind name, leaving out kinds never called; for
// reports and JSON.
func (s Snapshot) Map() map[string]int64 {
	out := map[string]int64{}
	for k, c := range s.Calls {
		if c != 0 {
			out[Kind(k).String()] = c
		}
	}
	return out
}

// rejected reports whether err says the call never reached the backend.
func rejected(err error) bool {
	return errors.Is(err, queue.ErrBatchSize) || errors.Is(err, queue.ErrInvalidArgument) ||
		errors.Is(err, queue.ErrInvalidName) || errors.Is(err, queue.ErrClosed) ||
		errors.Is(err, queue.ErrUnsupported) || errors.Is(err, context.Canceled)
}

var _ queue.Observer = (*Meter)(nil)

// Observe counts one call of a queue (queue.Observer). A call refused
// before it reached the backend is counted apart and not billed; a batch
// delete (or put) is one call; where the driver has no batch delete (or
// put), the queue makes one Delete (Put) per message, and each is
// counted, so the meter shows what the backend really bills.
func (m *Meter) Observe(c queue.Call) {
	if c.Rejected || (c.Err != nil && rejected(c.Err)) {
		m.rej.Add(1)
		return
	}
	var k Kind
	switch c.Op {
	case queue.OpPut:
		k = Put
		if c.Err == nil {
			m.put.Add(1)
		}
	case queue.OpPutBatch:
		k = PutBatch
		m.put.Add(int64(c.Messages))
	case queue.OpGet:
		k = Get
		if c.Messages == 0 {
			k = GetEmpty
		}
		m.got.Add(int64(c.Messages))
	case queue.OpDelete:
		k = Delete
		if c.Err == nil {
			m.del.Add(1)
		}
	case queue.OpDeleteBatch:
		k = DeleteBatch
		m.del.Add(int64(c.Messages))
	case queue.OpUpdate:
		k = Update
	case queue.OpPeek:
		k = Peek
	case queue.OpCount:
		k = Count
	case queue.OpClear:
		k = Clear
	default:
		return // not a backend call the meter prices
	}
	m.calls[k].Add(1)
	if c.Units > 1 {
		m.extra.Add(int64(c.Units - 1))
	}
	if c.Err != nil {
		m.errs[k].Add(1)
		if queue.IsTransient(c.Err) {
			m.trans.Add(1)
		}
	}
}
