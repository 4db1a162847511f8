package redis_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/redis"
)

// commands counts the commands a go-redis client sends, by name ("client
// id" and "client unblock" apart), and those in flight.
type commands struct {
	mu       sync.Mutex
	sent     map[string]int
	inFlight map[string]int
}

func countCommands(rdb *goredis.Client) *commands {
	c := &commands{sent: map[string]int{}, inFlight: map[string]int{}}
	rdb.AddHook(c)
	return c
}

func (c *commands) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *commands) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if a := cmd.Args(); name == "client" && len(a) > 1 {
			name += " " + strings.ToLower(fmt.Sprint(a[1]))
		}
		c.mu.Lock()
		c.sent[name]++
		c.inFlight[name]++
		c.mu.Unlock()
		err := next(ctx, cmd)
		c.mu.Lock()
		c.inFlight[name]--
		c.mu.Unlock()
		return err
	}
}

func (c *commands) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.mu.Lock()
		c.sent["pipeline"]++
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (c *commands) snapshot() (sent, inFlight map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent, inFlight = map[string]int{}, map[string]int{}
	for k, v := range c.sent {
		sent[k] = v
	}
	for k, v := range c.inFlight {
		inFlight[k] = v
	}
	return sent, inFlight
}

// otherProcess is a second client on the same keys, with connections of its
// own: what another process would be to the server.
func otherProcess(t *testing.T, prefix string) *redis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	if pw := os.Getenv(redis.PasswordEnv); pw != "" {
		opt.Password = pw
	}
	rdb := goredis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	c := redis.New(rdb, redis.WithKeyPrefix(prefix))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustQueue(t testing.TB, c *redis.Client, name string) *queue.Queue {
	t.Helper()
	q, err := c.Queue(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func mustPut(t testing.TB, q *queue.Queue, body string, opts queue.PutOptions) string {
	t.Helper()
	id, err := q.Put(context.Background(), []byte(body), opts)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// wait fails the test unless ch receives within a generous guard against a
// hang (never a latency assertion).
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no signal within 30 s", what)
	}
}

// TestSubscribeWakesAcrossProcesses: one blocking connection serves every
// subscriber of every queue of the client, and a put by another client
// wakes the subscribers of its queue, and only them.
func TestSubscribeWakesAcrossProcesses(t *testing.T) {
	c, prefix := newClient(t)
	var rdb *goredis.Client
	mustQueue(t, c, "probe").As(&rdb)
	cmds := countCommands(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := mustQueue(t, c, "orders")
	var sigs []<-chan struct{}
	for range 3 {
		s, err := a.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, s)
	}
	other, err := mustQueue(t, c, "other").Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	producer := mustQueue(t, otherProcess(t, prefix), "orders")
	for round := range 3 {
		mustPut(t, producer, "wake", queue.PutOptions{})
		for i, s := range sigs {
			wait(t, s, "subscriber "+string(rune('0'+i)))
		}
		_ = round
	}
	select {
	case <-other:
		t.Fatal("a put to orders woke the subscriber of another queue")
	default:
	}
	sent, _ := cmds.snapshot()
	if sent["client id"] != 1 {
		t.Errorf("%d CLIENT ID commands: want one blocking connection for every queue with subscribers", sent["client id"])
	}
}

// TestSubscribeStopsWithItsContext: when the last subscriber leaves, the
// blocking command ends (CLIENT UNBLOCK) and its connection goes back; a
// new subscriber starts it again.
func TestSubscribeStopsWithItsContext(t *testing.T) {
	c, _ := newClient(t)
	q := mustQueue(t, c, "stops")
	var rdb *goredis.Client
	q.As(&rdb)
	cmds := countCommands(rdb)
	blocked := func() int { _, in := cmds.snapshot(); return in["bzpopmin"] }
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := q.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "the subscriber blocks", func() bool { return blocked() == 1 })
		mustPut(t, q, "x", queue.PutOptions{})
		wait(t, s, "round "+string(rune('0'+round)))
		cancel()
		testutil.Eventually(t, 20*time.Second, "the blocking command ends", func() bool { return blocked() == 0 })
	}
}

// TestIdleSubscriberSendsOnlyBlockingCalls: an idle subscriber sends one
// BZPOPMIN per block timeout and nothing else. Counts are upper bounds, so
// a slow machine only lowers them.
func TestIdleSubscriberSendsOnlyBlockingCalls(t *testing.T) {
	c, _ := newClient(t, redis.WithBlockTimeout(time.Second))
	q := mustQueue(t, c, "idle")
	var rdb *goredis.Client
	q.As(&rdb)
	cmds := countCommands(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	if _, err := q.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond)
	sent, _ := cmds.snapshot()
	elapsed := time.Since(start)
	cancel()
	max := int(elapsed/time.Second) + 1
	for name, n := range sent {
		switch name {
		case "client id", "time": // once: the connection's id, and the server's clock
			if n != 1 {
				t.Errorf("%d %s commands, want 1", n, name)
			}
		case "bzpopmin":
			if n > max {
				t.Errorf("%d BZPOPMIN in %s with a 1 s block timeout, want at most %d", n, elapsed, max)
			}
		default:
			t.Errorf("an idle subscriber sent %d %s commands", n, name)
		}
	}
	t.Logf("idle for %s: %v", elapsed.Round(time.Millisecond), sent)
}

// TestDelayedPutSignalsWhenVisible: a put with an initial visibility delay
// signals at once and again when the message becomes visible.
func TestDelayedPutSignalsWhenVisible(t *testing.T) {
	c, prefix := newClient(t)
	q := mustQueue(t, c, "delayed")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := q.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	producer := mustQueue(t, otherProcess(t, prefix), "delayed")
	mustPut(t, producer, "later", queue.PutOptions{InitialVisibilityDelay: 1500 * time.Millisecond})
	wait(t, s, "the put")
	wait(t, s, "the end of the delay")
	for {
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 {
			break // visible now, or within a clock tick of now
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseStopsSubscribers: Client.Close ends the blocking loops, and the
// queues of a closed client fail with ErrClosed.
func TestCloseStopsSubscribers(t *testing.T) {
	c, _ := newClient(t)
	q := mustQueue(t, c, "close")
	var rdb *goredis.Client
	q.As(&rdb)
	cmds := countCommands(rdb)
	if _, err := q.Subscribe(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the subscriber blocks", func() bool { _, in := cmds.snapshot(); return in["bzpopmin"] == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, in := cmds.snapshot(); in["bzpopmin"] != 0 {
		t.Fatal("Close returned with the blocking command still running")
	}
	if _, err := q.Put(context.Background(), []byte("x"), queue.PutOptions{}); err == nil {
		t.Fatal("Put on a closed client succeeded")
	}
}
