// Command drainprobe drains an SQLite queue filled with n messages of one
// size, side by side with goqite batched (ReceiveTx/DeleteTx, 32 per
// transaction) and River on SQLite (river.go), in alternating rounds: adaptq through a listener with
// default options (listener.Options{Tasks: tasks, Concurrency: concurrency}), adaptq's raw Get(32)+DeleteBatch
// loop, and goqite. It prints each run's rate and CPU per message, and the
// medians. It is the probe of issue 34, small enough to build at an old
// revision too.
//
//	cd bench && go run ./cmd/drainprobe -size 200 -n 20000 -rounds 5
//	go run ./cmd/drainprobe -size 65536 -n 2000 -sides listener
//	go run ./cmd/drainprobe -sides listener -cpuprofile /tmp/l.pprof
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/maragudk/goqite"
	_ "modernc.org/sqlite"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/sqlite"
)

func main() {
	size := flag.Int("size", 200, "body size in bytes")
	n := flag.Int("n", 20000, "messages per drain")
	rounds := flag.Int("rounds", 3, "rounds (sides alternate)")
	sides := flag.String("sides", "goqite,listener,raw", "comma-separated sides: goqite, river, listener, raw, fill (adaptq's fill alone), goqitefill (goqite's), riverfill (River's)")
	flag.IntVar(&producers, "producers", 8, "goroutines that fill adaptq's queue (1 for a fill that does the same work each run, as under callgrind)")
	flag.StringVar(&driverName, "driver", "sqlite", "adaptq's driver: sqlite, or memory (the listener-overhead comparison: listener ÷ raw, the plain loop)")
	flag.IntVar(&tasks, "tasks", 1, "listener tasks, and raw loop goroutines")
	flag.IntVar(&concurrency, "concurrency", 0, "the listener's Concurrency (0: its default)")
	prof := flag.String("cpuprofile", "", "write a CPU profile of adaptq's drains (listener and raw) here")
	flag.Parse()
	ctx := context.Background()
	body := make([]byte, *size)
	const pat = `{"order":12345,"customer":"c-0001","note":"benchmark message body"}`
	for i := range body {
		body[i] = pat[i%len(pat)]
	}
	var pf *os.File
	if *prof != "" {
		var err error
		if pf, err = os.Create(*prof); err != nil {
			fail(err)
		}
	}
	names := strings.Split(*sides, ",")
	rates := map[string][]float64{}
	cpus := map[string][]float64{}
	for r := 0; r < *rounds; r++ {
		order := append([]string(nil), names...)
		if r%2 == 1 {
			sort.Sort(sort.Reverse(sort.StringSlice(order)))
		}
		for _, side := range order {
			dir, err := os.MkdirTemp("", "drainprobe")
			if err != nil {
				fail(err)
			}
			var d time.Duration
			var cpu time.Duration
			switch side {
			case "river", "riverfill":
				d, cpu, err = riverSide(ctx, dir, *n, body, side == "riverfill")
			case "goqite", "goqitefill":
				d, cpu, err = goqiteSide(ctx, dir, *n, body, side == "goqitefill")
			case "listener", "raw", "fill":
				d, cpu, err = adaptqSide(ctx, dir, *n, body, side, pf)
			default:
				err = fmt.Errorf("unknown side %q", side)
			}
			os.RemoveAll(dir)
			if err != nil {
				fail(fmt.Errorf("%s: %w", side, err))
			}
			rate := float64(*n) / d.Seconds()
			us := float64(cpu.Microseconds()) / float64(*n)
			sysShare = float64(sysSpan.Microseconds()) / float64(*n)
			rates[side] = append(rates[side], rate)
			cpus[side] = append(cpus[side], us)
			fmt.Printf("round %d %-8s %8.0f msgs/s  %6.2f µs CPU/msg (%5.2f sys)  %7.0f B written/msg  load %s\n", r+1, side, rate, us, sysShare, lastWritten, load())
		}
	}
	for _, side := range names {
		fmt.Printf("median %-8s %8.0f msgs/s  %6.2f µs CPU/msg\n", side, median(rates[side]), median(cpus[side]))
	}
	for _, peer := range []struct{ side, name string }{{"goqite", "goqite batched"}, {"river", "River"}} {
		if g := median(rates[peer.side]); g > 0 {
			for _, side := range []string{"listener", "raw"} {
				if a := median(rates[side]); a > 0 {
					fmt.Printf("%s ÷ %s: %.2f× (CPU per message: %.2f×)\n", side, peer.name, a/g, median(cpus[peer.side])/median(cpus[side]))
				}
			}
		}
	}
}

var (
	profiling, profiled bool
	concurrency         int
	producers           int
	tasks               int
	driverName          string
)

func adaptqSide(ctx context.Context, dir string, n int, body []byte, side string, pf *os.File) (time.Duration, time.Duration, error) {
	var q *queue.Queue
	if driverName == "memory" {
		var err error
		if q, err = memory.NewStore().Queue("bench"); err != nil {
			return 0, 0, err
		}
	} else {
		db, err := sqlite.Open(filepath.Join(dir, "adaptq.db"))
		if err != nil {
			return 0, 0, err
		}
		defer db.Close()
		if q, err = db.Queue("bench"); err != nil {
			return 0, 0, err
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var ferr atomic.Value
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
					ferr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := ferr.Load().(error); ok {
		return 0, 0, e
	}
	if side == "fill" { // the fill alone: subtract it from a run's instructions
		return time.Nanosecond, 0, nil
	}
	if pf != nil && !profiled {
		profiled = true
		{
			if err := pprof.StartCPUProfile(pf); err != nil {
				return 0, 0, err
			}
			profiling = true
		}
	}
	c0, w0 := cpuTime(), wchar()
	s0 := sysTime
	start := time.Now()
	var d time.Duration
	defer func() { lastWritten = float64(wchar()-w0) / float64(n) }()
	switch side {
	case "listener":
		l, err := listener.New(q, func(context.Context, *queue.Message) error { return nil }, listener.Options{Tasks: tasks, Concurrency: concurrency})
		if err != nil {
			return 0, 0, err
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := l.Start(rctx, tasks); err != nil {
			return 0, 0, err
		}
		for l.Drained() < int64(n) {
			if time.Since(start) > 10*time.Minute {
				return 0, 0, fmt.Errorf("drained %d of %d", l.Drained(), n)
			}
			time.Sleep(200 * time.Microsecond)
		}
		d = time.Since(start)
		cancel()
		if err := l.Wait(); err != nil {
			return 0, 0, err
		}
	case "raw":
		var wg sync.WaitGroup
		var rerr atomic.Value
		for range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := rawLoop(ctx, q); err != nil {
					rerr.Store(err)
				}
			}()
		}
		wg.Wait()
		if e, ok := rerr.Load().(error); ok {
			return 0, 0, e
		}
		d = time.Since(start)
	}
	cpu := cpuTime() - c0
	sysSpan = sysTime - s0
	if profiling {
		pprof.StopCPUProfile() // the first adaptq drain only
		profiling = false
		pf.Close()
	}
	if left, err := q.Count(ctx); err != nil || left != 0 {
		return 0, 0, fmt.Errorf("%d left (%v)", left, err)
	}
	return d, cpu, nil
}

// rawLoop is the hand-written consumer: get 32, no-op, delete the batch in
// one call, until a get finds the queue empty.
func rawLoop(ctx context.Context, q *queue.Queue) error {
	rs := make([]queue.Receipt, 0, 32)
	for {
		ms, err := q.Get(ctx, 32, time.Minute)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		rs = rs[:0]
		for _, m := range ms {
			rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
		if _, err := q.DeleteBatch(ctx, rs); err != nil {
			return err
		}
	}
}

func goqiteSide(ctx context.Context, dir string, n int, body []byte, fillOnly bool) (time.Duration, time.Duration, error) {
	v := url.Values{}
	v.Set("_busy_timeout", "5000")
	v.Set("_journal_mode", "WAL")
	v.Set("_synchronous", "NORMAL")
	v.Set("_txlock", "immediate")
	v.Add("_pragma", "temp_store(MEMORY)")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: filepath.Join(dir, "g.db"), RawQuery: v.Encode()}).String())
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if err := goqite.Setup(ctx, db); err != nil {
		return 0, 0, err
	}
	q := goqite.New(goqite.NewOpts{DB: db, Name: "bench", Timeout: 30 * time.Second})
	for left := n; left > 0; {
		k := min(left, 1000)
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			for i := 0; i < k; i++ {
				if err := q.SendTx(ctx, tx, goqite.Message{Body: body}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return 0, 0, err
		}
		left -= k
	}
	if fillOnly {
		return time.Nanosecond, 0, nil
	}
	c0, w0 := cpuTime(), wchar()
	s0 := sysTime
	defer func() { lastWritten = float64(wchar()-w0) / float64(n) }()
	start := time.Now()
	done := 0
	ms := make([]*goqite.Message, 0, 32)
	for {
		ms = ms[:0]
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			for len(ms) < 32 {
				m, err := q.ReceiveTx(ctx, tx)
				if err != nil || m == nil {
					return err
				}
				ms = append(ms, m)
			}
			return nil
		}); err != nil {
			return 0, 0, err
		}
		if len(ms) == 0 {
			break
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			for _, m := range ms {
				if err := q.DeleteTx(ctx, tx, m.ID); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return 0, 0, err
		}
		done += len(ms)
	}
	d := time.Since(start)
	cpu := cpuTime() - c0
	sysSpan = sysTime - s0
	if done != n {
		return 0, 0, fmt.Errorf("goqite drained %d of %d", done, n)
	}
	return d, cpu, nil
}

func inTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	sysTime = time.Duration(ru.Stime.Nano())
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sysTime is the kernel part of the CPU time cpuTime last read; sysShare
// the kernel part of the last drain's CPU per message, in µs.
var (
	sysTime, sysSpan time.Duration
	sysShare         float64
)

// lastWritten is the bytes written per message by the last drain
// (/proc/self/io wchar).
var lastWritten float64

func wchar() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "wchar:"); ok {
			var v int64
			fmt.Sscan(strings.TrimSpace(rest), &v)
			return v
		}
	}
	return 0
}

func load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "drainprobe:", err)
	os.Exit(1)
}
