package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// The soak of issue 21: a worker with the embedded default (SQLite, push
// trigger on) under a steady load with bursts and a few slow and failing
// handlers, for an hour, sampled every SoakSampleEvery. It ends with every
// message accounted for.
const (
	// SoakRate is the steady load, messages a second.
	SoakRate = 300
	// SoakBurst messages are put at once every SoakBurstEvery.
	SoakBurst      = 5000
	SoakBurstEvery = 30 * time.Second
	// Per mille of messages: slow handlers (SoakSlowMin..SoakSlowMax),
	// handlers that fail on the first run only, and permanent failures
	// (poisoned at once).
	SoakSlowPerMille      = 20
	SoakFailOncePerMille  = 10
	SoakPermanentPerMille = 2
	SoakSlowMin           = 500 * time.Millisecond
	SoakSlowMax           = 2 * time.Second
	// SoakSampleEvery is the sampling period of the series.
	SoakSampleEvery = 10 * time.Second
	// SoakBodySize is the size of every message body.
	SoakBodySize = 128
	// SoakPoisonDrainEvery is how often the soak's operator empties the
	// poison queue (counting what it finds), as a deployment does with its
	// poison tools: without it the poison queue, and with it the file and
	// SQLite's page cache, grow all hour by design.
	SoakPoisonDrainEvery = time.Minute
	// soakQueue is the queue's name.
	soakQueue = "soak"
)

// SoakConfig sizes a soak run.
type SoakConfig struct {
	Duration time.Duration // of the load
	// Warmup is left out of the slopes (default a sixth of Duration,
	// at least a minute, at most ten).
	Warmup time.Duration
	// Dir holds the SQLite file (default a fresh temporary directory).
	Dir string
	// Drain bounds the wait, after the load, for every message to be
	// accounted for (default 5 minutes: failed messages reappear after the
	// 30 s visibility timeout).
	Drain    time.Duration
	Progress func(format string, args ...any)
	// HeapProfiles, when set, is a directory where a heap profile
	// (after a GC) is written every ProfileEvery: `go tool pprof
	// -diff_base` of two of them shows what the live heap gained.
	HeapProfiles string
	ProfileEvery time.Duration
}

// SoakSample is one reading of the series.
type SoakSample struct {
	At         time.Duration // since the start
	RSS        int64         // bytes, VmRSS
	RSSAnon    int64         // of it, anonymous memory (RssAnon)
	RSSFile    int64         // of it, pages of files: the binary's code and data (RssFile)
	Threads    int           // OS threads
	Goroutines int
	HeapLive   int64 // bytes of Go heap live at the last GC
	GoMapped   int64 // bytes the Go runtime holds from the OS, less what it released
	OpenFiles  int
	DBFile     int64 // bytes of the SQLite file
	WALFile    int64 // bytes of its write-ahead log
	SHMFile    int64 // bytes of its shared-memory index
	Put        int64 // messages put so far
	Accounted  int64 // handled or permanently failed so far
	Tasks      int   // the listener's active tasks
}

// SoakResult is what a soak run found.
type SoakResult struct {
	Config   SoakConfig
	Machine  Machine
	Start    time.Time
	Elapsed  time.Duration // load and drain
	Drained  time.Duration // from the end of the load until every message was accounted for
	Samples  []SoakSample
	Put      int64 // messages put
	Handled  int64 // distinct messages whose handler succeeded
	Dups     int64 // successful runs of a message after its first
	Poisoned int64 // distinct messages in the poison queue
	// PoisonedWrongly are messages in the poison queue that were not
	// permanent failures; PoisonDups are extra copies of poisoned messages.
	PoisonedWrongly, PoisonDups int64
	Lost                        int64 // neither handled nor poisoned
	FailedOnce, Slow            int64 // handler runs that failed once by design; slow runs
	Shutdown                    time.Duration
	Stats                       map[string]int64 // the listener's counters at the end
	Revision                    string
}

// soakKind is the role of message seq in the workload, from a hash of it.
type soakKind int

const (
	soakFast soakKind = iota
	soakSlow
	soakFailOnce
	soakPermanent
)

func soakKindOf(seq uint64) soakKind {
	h := seq*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	h ^= h >> 31
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 29
	switch r := h % 1000; {
	case r < SoakSlowPerMille:
		return soakSlow
	case r < SoakSlowPerMille+SoakFailOncePerMille:
		return soakFailOnce
	case r < SoakSlowPerMille+SoakFailOncePerMille+SoakPermanentPerMille:
		return soakPermanent
	}
	return soakFast
}

// soakCapacity is the most messages a run of d puts.
func soakCapacity(d time.Duration) int {
	return int(d.Seconds()*SoakRate) + SoakRate + SoakBurst*(int(d/SoakBurstEvery)+1)
}

// RunSoak runs the soak. The books are allocated up front, so that they
// do not show in the heap series.
func RunSoak(ctx context.Context, c SoakConfig) (*SoakResult, error) {
	if c.Duration <= 0 {
		return nil, errors.New("soak: duration must be positive")
	}
	if c.Warmup <= 0 {
		c.Warmup = min(max(c.Duration/6, time.Minute), 10*time.Minute)
	}
	if c.Drain <= 0 {
		c.Drain = 5 * time.Minute
	}
	progress := c.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "adaptq-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		c.Dir = d
	}
	dbPath := filepath.Join(c.Dir, "soak.db")
	res := &SoakResult{Config: c, Machine: ReadMachine(), Start: time.Now(), Revision: revision()}

	capacity := soakCapacity(c.Duration)
	// One bit per message: handled, and permanently failed. They are
	// written to the end now, so that their pages are resident from the
	// start and do not show in the RSS series.
	handled, permanent := newBitset(capacity), newBitset(capacity)
	poisoned := make([]uint8, capacity) // copies of each message found in the poison queue
	for i := range poisoned {
		poisoned[i] = 0xff // resident now
	}
	clear(poisoned)
	var accounted, failedOnce, slow, dups atomic.Int64

	cfg := adaptq.DefaultConfig()
	cfg.Admin.Address = ""
	qc := adaptq.DefaultQueueConfig()
	qc.Name = soakQueue
	qc.URL = "sqlite://" + filepath.ToSlash(dbPath) + "?queue=" + soakQueue
	qc.Handler = soakQueue
	qc.Trigger.Enabled = true
	cfg.Queues = []adaptq.QueueConfig{qc}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		return nil, err
	}
	w.MustHandle(soakQueue, func(ctx context.Context, m *queue.Message) error {
		if len(m.Body) < 8 {
			return handler.Permanent(fmt.Errorf("soak: body of %d bytes", len(m.Body)))
		}
		seq := binary.BigEndian.Uint64(m.Body)
		if seq >= uint64(capacity) {
			return handler.Permanent(fmt.Errorf("soak: sequence %d out of range", seq))
		}
		switch soakKindOf(seq) {
		case soakSlow:
			slow.Add(1)
			d := SoakSlowMin + rand.N(SoakSlowMax-SoakSlowMin)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		case soakFailOnce:
			if m.DequeueCount == 1 {
				failedOnce.Add(1)
				return errors.New("soak: failing the first run")
			}
		case soakPermanent:
			if !permanent.set(seq) {
				accounted.Add(1)
			}
			return handler.Permanent(errors.New("soak: permanent failure"))
		}
		if handled.set(seq) {
			dups.Add(1)
		} else {
			accounted.Add(1)
		}
		return nil
	})

	runCtx, stopWorker := context.WithCancel(context.Background())
	defer stopWorker()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(runCtx) }()
	select {
	case <-w.Ready():
	case err := <-runErr:
		return nil, fmt.Errorf("soak: worker: %w", err)
	}
	l, _ := w.Listener(soakQueue)
	q, err := w.Queue(soakQueue)
	if err != nil {
		return nil, err
	}
	pq, err := q.Sibling(ctx, soakQueue+adaptq.PoisonSuffix)
	if err != nil {
		return nil, fmt.Errorf("soak: open the poison queue: %w", err)
	}
	defer pq.Close()

	// The producer: SoakRate a second, paced against the clock, and a
	// burst every SoakBurstEvery from the start on.
	var put atomic.Int64
	var putMu sync.Mutex // the sequence and the put together, so seqs are dense
	body := make([]byte, SoakBodySize)
	putOne := func() error {
		putMu.Lock()
		defer putMu.Unlock()
		seq := put.Load()
		if seq >= int64(capacity) {
			return nil
		}
		binary.BigEndian.PutUint64(body, uint64(seq))
		if _, err := w.Put(ctx, soakQueue, body, queue.PutOptions{}); err != nil {
			return err
		}
		put.Add(1)
		return nil
	}
	loadCtx, endLoad := context.WithTimeout(ctx, c.Duration)
	defer endLoad()
	var producers sync.WaitGroup
	var prodErr atomic.Pointer[error]
	fail := func(err error) {
		if err != nil && ctx.Err() == nil && loadCtx.Err() == nil {
			prodErr.CompareAndSwap(nil, &err)
			endLoad()
		}
	}
	t0 := time.Now()
	producers.Add(2)
	go func() { // steady
		defer producers.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var sent int64
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			due := int64(time.Since(t0).Seconds() * SoakRate)
			for ; sent < due && loadCtx.Err() == nil; sent++ {
				if err := putOne(); err != nil {
					fail(err)
					return
				}
			}
		}
	}()
	go func() { // bursts
		defer producers.Done()
		tick := time.NewTicker(SoakBurstEvery)
		defer tick.Stop()
		for {
			for i := 0; i < SoakBurst && loadCtx.Err() == nil; i++ {
				if err := putOne(); err != nil {
					fail(err)
					return
				}
			}
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	// The operator: empties the poison queue every SoakPoisonDrainEvery.
	drainCtx, stopDrain := context.WithCancel(ctx)
	defer stopDrain()
	drainDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(SoakPoisonDrainEvery)
		defer tick.Stop()
		for {
			select {
			case <-drainCtx.Done():
				drainDone <- nil
				return
			case <-tick.C:
			}
			if err := drainPoison(drainCtx, pq, poisoned, true); err != nil && drainCtx.Err() == nil {
				drainDone <- err
				return
			}
		}
	}()

	// The sampler.
	sample := func() SoakSample {
		s := SoakSample{
			At:         time.Since(t0),
			Goroutines: runtime.NumGoroutine(),
			OpenFiles:  openFiles(),
			DBFile:     sizeOf(dbPath),
			WALFile:    sizeOf(dbPath + "-wal"),
			SHMFile:    sizeOf(dbPath + "-shm"),
			Put:        put.Load(),
			Accounted:  accounted.Load(),
		}
		s.HeapLive, s.GoMapped = goMemory()
		st := procStatus()
		s.RSS, s.RSSAnon, s.RSSFile, s.Threads = st["VmRSS"]<<10, st["RssAnon"]<<10, st["RssFile"]<<10, int(st["Threads"])
		if l != nil {
			s.Tasks = l.ActiveTasks()
		}
		return s
	}
	res.Samples = append(res.Samples, sample())
	tick := time.NewTicker(SoakSampleEvery)
	defer tick.Stop()
	loadDone := loadCtx.Done()
	var drainStart time.Time
	var drainDeadline <-chan time.Time
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-loadDone:
			loadDone = nil
			producers.Wait()
			if p := prodErr.Load(); p != nil {
				return nil, fmt.Errorf("soak: put: %w", *p)
			}
			drainStart = time.Now()
			drainDeadline = time.After(c.Drain)
			progress("soak: load ended after %s: %d messages put; draining", time.Since(t0).Round(time.Second), put.Load())
		case <-drainDeadline:
			done = true
		case <-tick.C:
			s := sample()
			res.Samples = append(res.Samples, s)
			if c.HeapProfiles != "" && c.ProfileEvery > 0 && s.At/c.ProfileEvery != res.Samples[len(res.Samples)-2].At/c.ProfileEvery {
				if err := writeHeapProfile(filepath.Join(c.HeapProfiles, fmt.Sprintf("heap-%03dm.pprof", int(s.At.Minutes())))); err != nil {
					return nil, err
				}
			}
			progress("soak: %s put %d accounted %d rss %.1f MB (anon %.1f, files %.1f; go %.1f) heap %.1f MB goroutines %d threads %d files %d db %.1f MB wal %.1f MB tasks %d",
				s.At.Round(time.Second), s.Put, s.Accounted, mb(s.RSS), mb(s.RSSAnon), mb(s.RSSFile), mb(s.GoMapped), mb(s.HeapLive), s.Goroutines, s.Threads, s.OpenFiles, mb(s.DBFile), mb(s.WALFile), s.Tasks)
			if loadDone == nil && accounted.Load() == put.Load() {
				done = true
			}
		}
	}
	if !drainStart.IsZero() {
		res.Drained = time.Since(drainStart)
	}
	res.Put = put.Load()

	// Stop the operator and the worker, then read what is left in the
	// poison queue.
	stopDrain()
	if err := <-drainDone; err != nil {
		return nil, fmt.Errorf("soak: empty the poison queue: %w", err)
	}
	st0 := time.Now()
	stopWorker()
	if err := <-runErr; err != nil {
		return nil, fmt.Errorf("soak: worker: %w", err)
	}
	res.Shutdown = time.Since(st0)
	if l != nil {
		s := l.Stats()
		res.Stats = map[string]int64{
			"processed": s.Processed, "failed": s.Failed, "deleted": s.Deleted, "poisoned": s.Poisoned,
			"renewed": s.Renewed, "leases_lost": s.LeasesLost, "receipt_mismatches": s.ReceiptMismatches,
			"not_found": s.NotFound, "delete_errors": s.DeleteErrors, "get_errors": s.GetErrors,
			"empty_gets": s.EmptyGets, "triggers": s.Triggers, "work_detected": s.WorkDetected,
		}
		st, _ := l.State(context.Background()) // the local figures, whatever the count call says
		res.Stats["tasks_started"] = int64(st.TotalTasks)
	}
	if err := readPoison(ctx, dbPath, poisoned); err != nil {
		return nil, err
	}
	res.Dups = dups.Load()
	for seq := int64(0); seq < res.Put; seq++ {
		p := poisoned[seq]
		switch {
		case handled.get(uint64(seq)):
			res.Handled++
		case p == 0:
			res.Lost++
		}
		if p > 0 {
			res.Poisoned++
			res.PoisonDups += int64(p - 1)
			if soakKindOf(uint64(seq)) != soakPermanent {
				res.PoisonedWrongly++
			}
		}
	}
	res.FailedOnce, res.Slow = failedOnce.Load(), slow.Load()
	res.Elapsed = time.Since(t0)
	return res, nil
}

// readPoison adds the copies of each sequence number left in the poison
// queue, read from the file after the worker stopped, to poisoned.
func readPoison(ctx context.Context, dbPath string, poisoned []uint8) error {
	db, err := sqlite.Open(dbPath)
	if err != nil {
		return fmt.Errorf("soak: reopen: %w", err)
	}
	defer db.Close()
	q, err := db.Queue(soakQueue + adaptq.PoisonSuffix)
	if err != nil {
		return err
	}
	if err := drainPoison(ctx, q, poisoned, false); err != nil {
		return fmt.Errorf("soak: read the poison queue: %w", err)
	}
	return nil
}

// drainPoison gets every message of the poison queue q, adds one to
// poisoned[seq] for each, and deletes them when del is set (a message is
// counted once: a get hides it for an hour).
func drainPoison(ctx context.Context, q *queue.Queue, poisoned []uint8, del bool) error {
	for {
		ms, err := q.Get(ctx, queue.MaxBatchSize, time.Hour)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		rs := make([]queue.Receipt, 0, len(ms))
		for _, m := range ms {
			if seq, ok := soakSeq(m); ok && seq < uint64(len(poisoned)) {
				poisoned[seq]++
			}
			rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
		if del {
			if _, err := q.DeleteBatch(ctx, rs); err != nil {
				return err
			}
		}
	}
}

// soakSeq is the sequence number a poisoned message carries: the first 8
// bytes of the original body, inside the poison envelope (or the bare body
// an older version poisoned).
func soakSeq(m *queue.Message) (uint64, bool) {
	body := poison.Decode(m).Body
	if len(body) < 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(body), true
}

// writeHeapProfile writes the live heap, after a GC, to path.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("soak: heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("soak: heap profile: %w", err)
	}
	return f.Close()
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// procStatus is the numbers of this process's /proc/self/status (Linux;
// sizes in kB), empty where it cannot be read.
func procStatus() map[string]int64 {
	m := map[string]int64{}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) > 0 {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				m[k] = n
			}
		}
	}
	return m
}

func openFiles() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// sizeOf is the size of one file, 0 if it is not there.
func sizeOf(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// goMemory is the live heap at the last GC and what the Go runtime holds
// from the OS (mapped, less released to it).
func goMemory() (live, mapped int64) {
	ss := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(ss)
	v := func(i int) int64 {
		if ss[i].Value.Kind() == metrics.KindUint64 {
			return int64(ss[i].Value.Uint64())
		}
		return 0
	}
	return v(0), v(1) - v(2)
}

// bitset is a fixed set of bits, set atomically.
type bitset []atomic.Uint64

func newBitset(n int) bitset {
	b := make(bitset, (n+63)/64)
	for i := range b {
		b[i].Store(0)
	}
	return b
}

// set sets bit i and reports whether it was set already.
func (b bitset) set(i uint64) bool {
	m := uint64(1) << (i % 64)
	return b[i/64].Or(m)&m != 0
}

func (b bitset) get(i uint64) bool { return b[i/64].Load()&(1<<(i%64)) != 0 }
