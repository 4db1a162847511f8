// Package memory is the in-process queue driver: exact Azure semantics held
// in a heap, safe for concurrent use, on an injectable clock. Tests and the
// simulator use it; nothing survives the process.
//
// Each queue keeps its messages in a binary min-heap ordered by the time
// they become visible (ties by id, so the queue is FIFO among visible
// messages) and a map from id to message. Get pops the visible head, hides
// it and sifts it down: O(log n) per message. Expired messages are dropped
// when they reach the head, and by Count.
//
// Queues live in a Store. The URL memory://NAME opens NAME in the process's
// Default store, so a producer and a worker in one process share it.
//
// The driver has every capability of the contract, native notify
// included: a Put wakes the queue's subscribers in the process. Its batch
// limit can be lowered (WithMaxBatch) to test consumers against backends
// whose batches are smaller than Azure's 32, such as SQS's 10.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

func init() {
	queue.Register("memory", queue.OpenerFunc(openURL))
}

// Default is the store behind memory:// URLs.
var Default = NewStore()

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read time from c (a fake clock in tests and in
// the simulator).
func WithClock(c queue.Clock) Option { return func(s *Store) { s.clock = c } }

// WithMaxBodySize sets the body limit (default queue.DefaultMaxBodySize).
func WithMaxBodySize(n int) Option { return func(s *Store) { s.maxBody = n } }

// WithMaxBatch sets the most messages one Get returns (1 to
// queue.MaxBatchSize, the default; other values keep the default), to
// stand in for a backend with a smaller limit.
func WithMaxBatch(n int) Option { return func(s *Store) { s.maxBatch = n } }

// Store holds named queues in memory.
type Store struct {
	clock    queue.Clock
	maxBody  int
	maxBatch int

	mu     sync.Mutex
	queues map[string]*state

	ids      atomic.Uint64
	receipts atomic.Uint64
}

// NewStore returns an empty store.
func NewStore(opts ...Option) *Store {
	s := &Store{clock: queue.SystemClock{}, maxBody: queue.DefaultMaxBodySize, maxBatch: queue.MaxBatchSize, queues: map[string]*state{}}
	for _, o := range opts {
		o(s)
	}
	if s.maxBatch < 1 || s.maxBatch > queue.MaxBatchSize {
		s.maxBatch = queue.MaxBatchSize
	}
	return s
}

// Queue returns a handle on the queue called name, creating the queue on
// first use. Handles on one name share the messages. opts configure the
// handle as in queue.New (a meter, a wrapper).
func (s *Store) Queue(name string, opts ...queue.Option) (*queue.Queue, error) {
	d, err := s.open(name)
	if err != nil {
		return nil, err
	}
	return queue.New(d, opts...), nil
}

// Driver returns the driver of the queue called name, for a driver built
// on this one (a test double, a wrapper registered under its own scheme).
func (s *Store) Driver(name string) (driver.Queue, error) { return s.open(name) }

// open returns the driver of the queue called name.
func (s *Store) open(name string) (*memQueue, error) {
	if err := queue.ValidateName(name); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.queues[name]
	if !ok {
		st = &state{byID: map[uint64]*entry{}, minExpiry: math.MaxInt64}
		s.queues[name] = st
	}
	return &memQueue{s: s, st: st, name: name}, nil
}

func openURL(_ context.Context, u *url.URL) (driver.Queue, error) {
	if err := queue.CheckParams(u); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	name := u.Host
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		if name != "" {
			return nil, fmt.Errorf("memory: %w %q: want memory://NAME", queue.ErrInvalidURL, u.String())
		}
		name = p
	}
	if name == "" {
		return nil, fmt.Errorf("memory: %w %q: no queue name (want memory://NAME)", queue.ErrInvalidURL, u.String())
	}
	return Default.open(name)
}

// entry is one stored message. Times are unix nanoseconds.
type entry struct {
	id        uint64
	idStr     string
	body      []byte
	meta      map[string]string
	receipt   uint64
	dequeues  int
	inserted  int64
	expires   int64 // math.MaxInt64: never
	visibleAt int64
	index     int // position in the heap
}

func (e *entry) before(o *entry) bool {
	if e.visibleAt != o.visibleAt {
		return e.visibleAt < o.visibleAt
	}
	return e.id < o.id
}

// state is one queue's messages.
type state struct {
	mu        sync.Mutex
	heap      []*entry
	byID      map[uint64]*entry
	minExpiry int64 // no message expires before this

	// Subscribers of native notify; nsubs lets Put skip subMu when there
	// are none.
	nsubs atomic.Int32
	subMu sync.Mutex
	subs  map[chan struct{}]struct{}
}

// memQueue is the driver of one queue of a Store.
type memQueue struct {
	s    *Store
	st   *state
	name string
}

var _ driver.Queue = (*memQueue)(nil)

func (q *memQueue) Name() string { return q.name }

func (q *memQueue) Features() driver.Features {
	return driver.Features{
		Name:         "memory",
		MaxBatch:     q.s.maxBatch,
		MaxPeek:      queue.MaxPeek,
		MaxBody:      q.s.maxBody,
		ExactCount:   true,
		BatchDelete:  true,
		Siblings:     true,
		NativeNotify: true,
		Durability:   driver.InProcess,
		Metadata:     driver.DefaultMetadataLimits,
	}
}

// Sibling opens another queue of the same store.
func (q *memQueue) Sibling(_ context.Context, name string) (driver.Queue, error) {
	return q.s.open(name)
}

// Close does nothing: the messages stay in the store.
func (q *memQueue) Close() error { return nil }

// Classify knows no errors of its own: the memory driver fails only by the
// contract.
func (q *memQueue) Classify(err error) (bool, time.Duration) { return driver.DefaultClassify(err) }

// As gives the Store behind the queue to a *(*Store) target.
func (q *memQueue) As(target any) bool {
	if p, ok := target.(**Store); ok {
		*p = q.s
		return true
	}
	return false
}

// Subscribe returns a channel that receives after each Put to the queue in
// this process (through any handle of the store), until ctx ends.
func (q *memQueue) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	st := q.st
	st.subMu.Lock()
	if st.subs == nil {
		st.subs = map[chan struct{}]struct{}{}
	}
	st.subs[ch] = struct{}{}
	st.nsubs.Add(1)
	st.subMu.Unlock()
	context.AfterFunc(ctx, func() {
		st.subMu.Lock()
		delete(st.subs, ch)
		st.nsubs.Add(-1)
		st.subMu.Unlock()
	})
	return ch, nil
}

// notify signals the queue's subscribers.
func (st *state) notify() {
	if st.nsubs.Load() == 0 {
		return
	}
	st.subMu.Lock()
	for ch := range st.subs {
		select {
		case ch <- struct{}{}:
		default: // one is pending already
		}
	}
	st.subMu.Unlock()
}

func (q *memQueue) now() int64 { return q.s.clock.Now().UnixNano() }

// Put stores a copy of body.
func (q *memQueue) Put(_ context.Context, body []byte, opts driver.PutOptions) (string, error) {
	e := q.newEntry(body, opts, q.now())
	st := q.st
	st.mu.Lock()
	st.insert(e)
	st.mu.Unlock()
	st.notify()
	return e.idStr, nil
}

var _ driver.PutBatcher = (*memQueue)(nil)

// PutBatch stores copies of the requests' messages at once (one lock, one
// wake of the subscribers), under ids in their order.
func (q *memQueue) PutBatch(_ context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	now := q.now()
	es := make([]*entry, len(reqs))
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		es[i] = q.newEntry(r.Body, r.Opts, now)
		ids[i] = es[i].idStr
	}
	st := q.st
	st.mu.Lock()
	for _, e := range es {
		st.insert(e)
	}
	st.mu.Unlock()
	st.notify()
	return ids, make([]error, len(reqs)), nil
}

// newEntry is the message a Put of body with opts stores at now: what Put
// and PutBatch share.
func (q *memQueue) newEntry(body []byte, opts driver.PutOptions, now int64) *entry {
	e := &entry{
		id:        q.s.ids.Add(1),
		body:      append([]byte(nil), body...),
		meta:      driver.CloneMetadata(opts.Metadata),
		inserted:  now,
		expires:   addSat(now, opts.TTL),
		visibleAt: now + int64(opts.InitialVisibilityDelay),
	}
	e.idStr = strconv.FormatUint(e.id, 10)
	return e
}

// insert adds a new entry (st.mu held).
func (st *state) insert(e *entry) {
	st.byID[e.id] = e
	st.push(e)
	if e.expires < st.minExpiry {
		st.minExpiry = e.expires
	}
}

// addSat returns now+d, math.MaxInt64 for queue.NoExpiry or on overflow.
func addSat(now int64, d time.Duration) int64 {
	if d == driver.NoExpiry || now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}

// Get hides and returns up to n visible messages.
func (q *memQueue) Get(_ context.Context, n int, visibility time.Duration) ([]*driver.Message, error) {
	now := q.now()
	until := now + int64(visibility)
	var got [queue.MaxBatchSize]*entry
	k := 0
	size := 0
	st := q.st
	st.mu.Lock()
	for k < n && len(st.heap) > 0 && st.heap[0].visibleAt <= now {
		e := st.heap[0]
		if e.expires <= now {
			st.remove(0)
			delete(st.byID, e.id)
			continue
		}
		e.visibleAt = until
		e.receipt = q.s.receipts.Add(1)
		e.dequeues++
		st.down(0)
		got[k] = e
		size += len(e.body)
		k++
	}
	if k == 0 {
		st.mu.Unlock()
		return nil, nil
	}
	// One allocation each for the messages, the bodies and the receipts.
	ms := make([]driver.Message, k)
	out := make([]*driver.Message, k)
	bodies := make([]byte, 0, size)
	var rb []byte
	rend := make([]int, k)
	for i, e := range got[:k] {
		start := len(bodies)
		bodies = append(bodies, e.body...)
		ms[i] = driver.Message{
			ID:            e.idStr,
			Body:          bodies[start:len(bodies):len(bodies)],
			DequeueCount:  e.dequeues,
			InsertedAt:    time.Unix(0, e.inserted),
			ExpiresAt:     expiresTime(e.expires),
			NextVisibleAt: time.Unix(0, until),
			Metadata:      maps.Clone(e.meta),
		}
		rb = strconv.AppendUint(rb, e.receipt, 36)
		rend[i] = len(rb)
		out[i] = &ms[i]
	}
	st.mu.Unlock()
	receipts := string(rb)
	prev := 0
	for i := range ms {
		ms[i].PopReceipt = receipts[prev:rend[i]]
		prev = rend[i]
	}
	return out, nil
}

func expiresTime(ns int64) time.Time {
	if ns == math.MaxInt64 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// lookup finds a live message by id and checks its receipt. The caller
// holds st.mu.
func (st *state) lookup(id, receipt string, now int64) (*entry, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: id %q", queue.ErrNotFound, id)
	}
	e, ok := st.byID[n]
	if !ok {
		return nil, fmt.Errorf("%w: id %q", queue.ErrNotFound, id)
	}
	if e.expires <= now {
		st.remove(e.index)
		delete(st.byID, e.id)
		return nil, fmt.Errorf("%w: id %q expired", queue.ErrNotFound, id)
	}
	r, err := strconv.ParseUint(receipt, 36, 64)
	if err != nil || r != e.receipt || e.receipt == 0 {
		return nil, fmt.Errorf("%w: id %q", queue.ErrReceiptMismatch, id)
	}
	return e, nil
}

// Delete removes a message held with its newest receipt.
func (q *memQueue) Delete(_ context.Context, id, popReceipt string) error {
	now := q.now()
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	e, err := st.lookup(id, popReceipt, now)
	if err != nil {
		return err
	}
	st.remove(e.index)
	delete(st.byID, e.id)
	return nil
}

// DeleteBatch deletes many messages under one lock.
func (q *memQueue) DeleteBatch(_ context.Context, receipts []driver.Receipt) ([]error, error) {
	res := make([]error, len(receipts))
	now := q.now()
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, r := range receipts {
		e, err := st.lookup(r.ID, r.PopReceipt, now)
		if err != nil {
			res[i] = err
			continue
		}
		st.remove(e.index)
		delete(st.byID, e.id)
	}
	return res, nil
}

// UpdateVisibility hides a held message for d from now and returns its new
// receipt.
func (q *memQueue) UpdateVisibility(_ context.Context, id, popReceipt string, d time.Duration) (string, error) {
	now := q.now()
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	e, err := st.lookup(id, popReceipt, now)
	if err != nil {
		return "", err
	}
	e.receipt = q.s.receipts.Add(1)
	e.visibleAt = now + int64(d)
	st.fix(e.index)
	return strconv.FormatUint(e.receipt, 36), nil
}

// Peek returns up to n visible messages, oldest first, changing nothing.
func (q *memQueue) Peek(_ context.Context, n int) ([]*driver.Message, error) {
	now := q.now()
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	// Walk the heap in order without changing it: a small frontier heap of
	// candidate positions yields the k smallest in O(k log k).
	var out []*driver.Message
	frontier := []int{}
	push := func(i int) {
		if i < len(st.heap) && st.heap[i].visibleAt <= now {
			frontier = append(frontier, i)
			for j := len(frontier) - 1; j > 0; {
				p := (j - 1) / 2
				if !st.heap[frontier[j]].before(st.heap[frontier[p]]) {
					break
				}
				frontier[j], frontier[p] = frontier[p], frontier[j]
				j = p
			}
		}
	}
	pop := func() int {
		top := frontier[0]
		last := len(frontier) - 1
		frontier[0] = frontier[last]
		frontier = frontier[:last]
		for j := 0; ; {
			l, r, m := 2*j+1, 2*j+2, j
			if l < len(frontier) && st.heap[frontier[l]].before(st.heap[frontier[m]]) {
				m = l
			}
			if r < len(frontier) && st.heap[frontier[r]].before(st.heap[frontier[m]]) {
				m = r
			}
			if m == j {
				break
			}
			frontier[j], frontier[m] = frontier[m], frontier[j]
			j = m
		}
		return top
	}
	push(0)
	for len(out) < n && len(frontier) > 0 {
		i := pop()
		e := st.heap[i]
		push(2*i + 1)
		push(2*i + 2)
		if e.expires <= now {
			continue
		}
		out = append(out, &driver.Message{
			ID:            e.idStr,
			Body:          append([]byte(nil), e.body...),
			Metadata:      maps.Clone(e.meta),
			DequeueCount:  e.dequeues,
			InsertedAt:    time.Unix(0, e.inserted),
			ExpiresAt:     expiresTime(e.expires),
			NextVisibleAt: time.Unix(0, e.visibleAt),
		})
	}
	return out, nil
}

var _ driver.PeekPager = (*memQueue)(nil)

// PeekAfter returns up to n visible messages put after the message whose
// id is after ("" from the first), in the order they were put (by id),
// changing nothing. It walks the queue once under its lock, holding only
// the page: no backend call to bill, and a store holds what fits in memory.
func (q *memQueue) PeekAfter(_ context.Context, after string, n int) ([]*driver.Message, error) {
	var from uint64
	if after != "" {
		var err error
		if from, err = strconv.ParseUint(after, 10, 64); err != nil {
			return nil, fmt.Errorf("%w: after %q is not an id of this queue", driver.ErrInvalidArgument, after)
		}
	}
	if n < 1 {
		return nil, nil
	}
	now := q.now()
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	// The n smallest ids after from, kept sorted: one pass, holding only
	// the page (n is at most MaxPeek).
	page := make([]*entry, 0, n)
	for _, e := range st.heap {
		if e.id <= from || e.visibleAt > now || e.expires <= now {
			continue
		}
		if len(page) == n && e.id > page[n-1].id {
			continue
		}
		i, _ := slices.BinarySearchFunc(page, e.id, func(p *entry, id uint64) int { return cmp.Compare(p.id, id) })
		if len(page) == n {
			page = page[:n-1]
		}
		page = slices.Insert(page, i, e)
	}
	out := make([]*driver.Message, 0, len(page))
	for _, e := range page {
		out = append(out, &driver.Message{
			ID:            e.idStr,
			Body:          append([]byte(nil), e.body...),
			Metadata:      maps.Clone(e.meta),
			DequeueCount:  e.dequeues,
			InsertedAt:    time.Unix(0, e.inserted),
			ExpiresAt:     expiresTime(e.expires),
			NextVisibleAt: time.Unix(0, e.visibleAt),
		})
	}
	return out, nil
}

// Count returns the number of unexpired messages, visible or not.
func (q *memQueue) Count(context.Context) (int, error) {
	now := q.now()
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.minExpiry <= now {
		st.purgeExpired(now)
	}
	return len(st.byID), nil
}

var _ driver.DepthReader = (*memQueue)(nil)

// Depth counts the unexpired messages, visible and hidden, and finds the
// oldest: one walk of the queue under its lock.
func (q *memQueue) Depth(context.Context) (driver.Depth, error) {
	now := q.now()
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	var d driver.Depth
	oldest := int64(math.MaxInt64)
	for _, e := range st.heap {
		if e.expires <= now {
			continue
		}
		if e.visibleAt <= now {
			d.Visible++
		} else {
			d.InFlight++
		}
		oldest = min(oldest, e.inserted)
	}
	if oldest != math.MaxInt64 {
		d.Oldest = time.Unix(0, oldest)
	}
	return d, nil
}

// Clear deletes every message.
func (q *memQueue) Clear(context.Context) error {
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	st.heap = nil
	st.byID = map[uint64]*entry{}
	st.minExpiry = math.MaxInt64
	return nil
}

// purgeExpired drops every expired message and rebuilds the heap: O(n),
// run only when some message may have expired.
func (st *state) purgeExpired(now int64) {
	kept := st.heap[:0]
	st.minExpiry = math.MaxInt64
	for _, e := range st.heap {
		if e.expires <= now {
			delete(st.byID, e.id)
			continue
		}
		if e.expires < st.minExpiry {
			st.minExpiry = e.expires
		}
		e.index = len(kept)
		kept = append(kept, e)
	}
	for i := len(kept); i < len(st.heap); i++ {
		st.heap[i] = nil
	}
	st.heap = kept
	for i := len(st.heap)/2 - 1; i >= 0; i-- {
		st.down(i)
	}
}

// The heap, by hand to avoid container/heap's interface calls.

func (st *state) push(e *entry) {
	e.index = len(st.heap)
	st.heap = append(st.heap, e)
	st.up(e.index)
}

func (st *state) remove(i int) {
	last := len(st.heap) - 1
	if i != last {
		st.swap(i, last)
	}
	st.heap[last] = nil
	st.heap = st.heap[:last]
	if i != last {
		st.fix(i)
	}
}

func (st *state) fix(i int) {
	if !st.down(i) {
		st.up(i)
	}
}

func (st *state) swap(i, j int) {
	h := st.heap
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (st *state) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !st.heap[j].before(st.heap[i]) {
			break
		}
		st.swap(i, j)
		j = i
	}
}

// down sifts i down and reports whether it moved.
func (st *state) down(i0 int) bool {
	h := st.heap
	n := len(h)
	i := i0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].before(h[l]) {
			j = r
		}
		if !h[j].before(h[i]) {
			break
		}
		st.swap(i, j)
		i = j
	}
	return i > i0
}

// Inspect returns every live message of the queue called name, visible or
// hidden, in the order they were put, with their dequeue counts and when
// each becomes visible, but no pop receipts; it changes nothing and bills
// nothing. A queue the store does not hold has none. It is for tests that
// must tell a hidden message from a deleted one (package adaptqtest);
// consumers Peek.
func (s *Store) Inspect(name string) []queue.Message {
	s.mu.Lock()
	st, ok := s.queues[name]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	now := s.clock.Now().UnixNano()
	st.mu.Lock()
	live := make([]*entry, 0, len(st.heap))
	for _, e := range st.heap {
		if e.expires > now {
			live = append(live, e)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].id < live[j].id })
	out := make([]queue.Message, len(live))
	for i, e := range live {
		out[i] = queue.Message{
			ID:            e.idStr,
			Body:          append([]byte(nil), e.body...),
			Metadata:      maps.Clone(e.meta),
			DequeueCount:  e.dequeues,
			InsertedAt:    time.Unix(0, e.inserted),
			ExpiresAt:     expiresTime(e.expires),
			NextVisibleAt: time.Unix(0, e.visibleAt),
		}
	}
	st.mu.Unlock()
	return out
}
