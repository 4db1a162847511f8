package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/scaling"
)

// pgWakeChildEnv turns this program into the consumer process of the
// cross-process wake trials: its value is "URL SCHEMA".
const pgWakeChildEnv = "ADAPTQ_BENCH_PG_WAKE"

// runPGWakeChildIfAsked runs the wake consumer and exits if asked.
func runPGWakeChildIfAsked() {
	spec := os.Getenv(pgWakeChildEnv)
	if spec == "" {
		return
	}
	if err := pgWakeChild(spec); err != nil {
		fmt.Fprintln(os.Stderr, "pg wake child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// pgWakeChild is a worker as adaptq runs one with a push trigger on a
// PostgreSQL queue: one dequeue task that sleeps until the driver's
// native notify wakes it (safety interval 5 min). Its handler prints how
// long ago the producer stamped the message; it runs until its standard
// input closes.
func pgWakeChild(spec string) error {
	base, schema, ok := strings.Cut(spec, " ")
	if !ok {
		return fmt.Errorf("bad spec %q", spec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := postgres.Open(ctx, base, postgres.WithSchema(schema))
	if err != nil {
		return err
	}
	defer db.Close()
	q, err := db.Queue(ctx, "wake")
	if err != nil {
		return err
	}
	n := &listener.LocalNotifier{}
	sig, err := q.Subscribe(ctx)
	if err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				n.Notify("wake")
			}
		}
	}()
	var mu sync.Mutex
	h := func(_ context.Context, m *queue.Message) error {
		at, err := strconv.ParseInt(string(m.Body), 10, 64)
		if err != nil {
			return nil
		}
		mu.Lock()
		fmt.Printf("wake %d\n", time.Now().UnixNano()-at)
		mu.Unlock()
		return nil
	}
	l, err := listener.New(q, h, listener.Options{Tasks: 1, MinTasks: 1, Notifier: n, Idle: scaling.IdleBackoff{Min: pgWakeIdleMin}})
	if err != nil {
		return err
	}
	if err := l.Start(ctx, 1); err != nil {
		return err
	}
	// Time for the LISTEN connection and the first, empty Gets.
	time.Sleep(time.Second)
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	return l.Wait()
}

// pgWakeIdleMin is the consumer's idle.min: the listener's trigger floor,
// the least time between an empty Get and a triggered one (100 ms by
// default, which batches a trickle of billed puts), is idle.min; on a
// backend that bills nothing per call, 1 ms lets a notification be acted
// on at once (configs/postgres.yaml sets it).
const pgWakeIdleMin = time.Millisecond

// pgWakeGap is the least time between two wake trials.
const pgWakeGap = 20 * time.Millisecond

// pgWake puts trials messages, each stamped with the time before its Put,
// 20 to 70 ms apart, to a consumer in another process that sleeps until
// notified, and returns the put-to-handler latencies.
func pgWake(ctx context.Context, e *Env, base string, trials int) (lat, afterCommit []time.Duration, err error) {
	s, err := openPGSide(ctx, base, nil)
	if err != nil {
		return nil, nil, err
	}
	defer s.close()
	q, err := s.db.Queue(ctx, "wake")
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, e.Self[0], e.Self[1:]...)
	cmd.Env = append(os.Environ(), pgWakeChildEnv+"="+base+" "+s.schema)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	lines := make(chan string, trials+2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() (string, error) {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", fmt.Errorf("the consumer process ended")
			}
			return l, nil
		case <-time.After(30 * time.Second):
			return "", fmt.Errorf("no word from the consumer process: %w", errTimeout)
		}
	}
	if l, err := next(); err != nil || l != "ready" {
		return nil, nil, fmt.Errorf("consumer: %q, %v", l, err)
	}
	for i := 0; i < trials; i++ {
		time.Sleep(pgWakeGap + time.Duration(rand.IntN(50))*time.Millisecond)
		t0 := time.Now()
		if _, err := q.Put(ctx, []byte(strconv.FormatInt(t0.UnixNano(), 10)), queue.PutOptions{}); err != nil {
			return nil, nil, err
		}
		put := time.Since(t0)
		l, err := next()
		if err != nil {
			return nil, nil, err
		}
		v, ok := strings.CutPrefix(l, "wake ")
		ns, perr := strconv.ParseInt(v, 10, 64)
		if !ok || perr != nil {
			return nil, nil, fmt.Errorf("consumer said %q", l)
		}
		lat = append(lat, time.Duration(ns))
		afterCommit = append(afterCommit, max(time.Duration(ns)-put, 0))
	}
	return lat, afterCommit, nil
}
