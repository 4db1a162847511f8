package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/queue"
)

// The multi-process tests run this test binary again as a child process
// (TestHelperProcess, switched on by helperEnv) that opens the same file.
const (
	helperEnv   = "ADAPTQ_SQLITE_HELPER" // put | consume
	helperPath  = "ADAPTQ_SQLITE_PATH"
	helperCount = "ADAPTQ_SQLITE_N" // put: how many (0: until killed)
	helperQueue = "shared"
)

// TestHelperProcess is the child side. It prints "id N" for every message
// it put (after Put returned) or consumed (after it was deleted).
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("the child process of the multi-process tests")
	}
	if err := helper(mode); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(mode string) error {
	n, _ := strconv.Atoi(os.Getenv(helperCount))
	db, err := Open(os.Getenv(helperPath))
	if err != nil {
		return err
	}
	defer db.Close()
	q, err := db.Queue(helperQueue)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(id string) {
		mu.Lock()
		fmt.Printf("id %s\n", id) // os.Stdout is unbuffered: written when Println returns
		mu.Unlock()
	}
	ctx := context.Background()
	switch mode {
	case "put":
		// Four producers, so that kills land inside shared commits too.
		var next sync.Mutex
		i := 0
		g, ctx := errgroup.WithContext(ctx)
		for range 4 {
			g.Go(func() error {
				for {
					next.Lock()
					i++
					k := i
					next.Unlock()
					if n > 0 && k > n {
						return nil
					}
					id, err := q.Put(ctx, []byte(fmt.Sprintf("child-%d", k)), queue.PutOptions{})
					if queue.IsTransient(err) {
						continue
					}
					if err != nil {
						return err
					}
					say(id)
				}
			})
		}
		return g.Wait()
	case "consume":
		return consume(ctx, q, workPause, say, func() bool { return true })
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// workPause stands for a handler's work on a batch, so that two consumers
// of a small backlog interleave.
const workPause = 500 * time.Microsecond

// consume gets and deletes until the queue is empty and stop says so,
// pausing for pause per batch and calling took for each message deleted.
func consume(ctx context.Context, q *queue.Queue, pause time.Duration, took func(id string), stop func() bool) error {
	for {
		ms, err := q.Get(ctx, queue.MaxBatchSize, 5*time.Minute)
		if queue.IsTransient(err) {
			continue
		}
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			if stop() {
				return nil
			}
			time.Sleep(time.Millisecond)
			continue
		}
		time.Sleep(pause)
		rs := make([]queue.Receipt, len(ms))
		for i, m := range ms {
			rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
		}
		var res []error
		for {
			if res, err = q.DeleteBatch(ctx, rs); !queue.IsTransient(err) {
				break
			}
		}
		if err != nil {
			return err
		}
		for i, r := range res {
			if r != nil {
				return fmt.Errorf("delete %s: %w", rs[i].ID, r)
			}
			took(rs[i].ID)
		}
	}
}

// child starts the helper in mode on path and returns it with its stdout.
func child(t *testing.T, mode, path string, n int) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperPath+"="+path, helperCount+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out
}

// readIDs collects the "id N" lines of r until EOF.
func readIDs(r io.Reader, each func(id string)) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id "); ok {
			each(id)
		}
	}
	return sc.Err()
}

// TestTwoProcessesProduceConsume: a child process puts while this one gets
// and deletes from the same file; every message is consumed exactly once.
func TestTwoProcessesProduceConsume(t *testing.T) {
	const n = 2000
	path := filepath.Join(t.TempDir(), "two.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := mustQueue(t, db, helperQueue)

	cmd, out := child(t, "put", path, n)
	var (
		mu       sync.Mutex
		put      = map[string]bool{}
		consumed = map[string]int{}
	)
	readDone := make(chan error, 1)
	go func() {
		readDone <- readIDs(out, func(id string) { mu.Lock(); put[id] = true; mu.Unlock() })
	}()

	deadline := time.Now().Add(2 * time.Minute)
	g, gctx := errgroup.WithContext(context.Background())
	for range 2 {
		g.Go(func() error {
			return consume(gctx, q, 0, func(id string) {
				mu.Lock()
				consumed[id]++
				mu.Unlock()
			}, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(consumed) >= n || time.Now().After(deadline)
			})
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("producer process: %v", err)
	}
	if len(put) != n {
		t.Fatalf("the producer acknowledged %d of %d puts", len(put), n)
	}
	for id, k := range consumed {
		if k != 1 {
			t.Errorf("message %s consumed %d times", id, k)
		}
		if !put[id] {
			t.Errorf("consumed %s, which the producer never acknowledged", id)
		}
	}
	if len(consumed) != n {
		t.Fatalf("consumed %d of %d messages", len(consumed), n)
	}
	if c, err := q.Count(ctx); err != nil || c != 0 {
		t.Fatalf("Count afterwards = %d, %v", c, err)
	}
}

// TestTwoProcessesConsume: this process and a child drain one backlog at
// once; each message goes to exactly one of them.
func TestTwoProcessesConsume(t *testing.T) {
	const n = 3000
	path := filepath.Join(t.TempDir(), "drain.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := mustQueue(t, db, helperQueue)
	all := map[string]bool{}
	for i := range n {
		all[mustPut(t, q, fmt.Sprint(i), queue.PutOptions{})] = true
	}

	cmd, out := child(t, "consume", path, 0)
	theirs := map[string]int{}
	readDone := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		readDone <- readIDs(out, func(id string) {
			if len(theirs) == 0 {
				close(started)
			}
			theirs[id]++
		})
	}()
	select { // start once the child is draining too
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the child consumed nothing in a minute")
	}
	ours := map[string]int{}
	if err := consume(ctx, q, workPause, func(id string) { ours[id]++ }, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("consumer process: %v", err)
	}
	for id, k := range ours {
		if k != 1 || theirs[id] != 0 {
			t.Errorf("message %s consumed %d times here and %d times in the child", id, k, theirs[id])
		}
	}
	for id, k := range theirs {
		if k != 1 {
			t.Errorf("message %s consumed %d times in the child", id, k)
		}
	}
	if len(ours)+len(theirs) != n {
		t.Fatalf("consumed %d here and %d in the child, want %d in all", len(ours), len(theirs), n)
	}
	for id := range all {
		if ours[id]+theirs[id] != 1 {
			t.Fatalf("message %s was lost", id)
		}
	}
	t.Logf("parent consumed %d, child %d", len(ours), len(theirs))
}

// TestDurabilityAfterKill: a child puts and prints each id once Put has
// returned; it is killed with SIGKILL mid-stream. Every id it printed is
// in the file afterwards, and the file is intact.
func TestDurabilityAfterKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kill.db")
	cmd, out := child(t, "put", path, 0)
	var acked []string
	killed := false
	err := readIDs(out, func(id string) {
		acked = append(acked, id)
		if len(acked) == 500 && !killed {
			killed = true
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", werr)
	}

	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var check string
	if err := db.r.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	stored := map[string]bool{}
	rows, err := db.r.Query("SELECT id FROM messages")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		stored[strconv.FormatInt(id, 10)] = true
	}
	rows.Close()
	for _, id := range acked {
		if !stored[id] {
			t.Errorf("acknowledged message %s is gone after the kill", id)
		}
	}
	t.Logf("%d acknowledged before the kill landed, %d stored", len(acked), len(stored))
	if len(stored) < len(acked) {
		t.Fatalf("stored %d < acknowledged %d", len(stored), len(acked))
	}
	// And the queue works on.
	q := mustQueue(t, db, helperQueue)
	if ms := mustGet(t, q, 32, time.Minute); len(ms) != 32 {
		t.Fatalf("Get after the kill = %d messages", len(ms))
	}
}
