package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/redis"
)

// scriptWork counts, for each script a go-redis client sends, how many
// entries of the queue's sorted set it removed (read with the test's own
// connection before and after the script).
type scriptWork struct {
	mu      sync.Mutex
	z       string
	own     *goredis.Client
	scripts int
	maxGone int64
}

func (w *scriptWork) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (w *scriptWork) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		before := w.own.ZCard(ctx, w.z).Val()
		err := next(ctx, cmd)
		gone := before - w.own.ZCard(ctx, w.z).Val()
		w.mu.Lock()
		if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") { // then sent again as EVAL
			w.scripts++
		}
		w.maxGone = max(w.maxGone, gone)
		w.mu.Unlock()
		return err
	}
}

func (w *scriptWork) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (w *scriptWork) take() (scripts int, maxGone int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	scripts, maxGone = w.scripts, w.maxGone
	w.scripts, w.maxGone = 0, 0
	return scripts, maxGone
}

// TestExpiredBacklogCostsBoundedWorkPerCall: a live message put behind
// 3,000 expired ones (on the test's own server, whose command statistics
// are the test's alone). One Peek(1) and one Get(1) each return the live
// message, and no script they send reads more than one message's hash
// (HMGET) per message asked for or drops more than SweepChunk expired
// messages besides those it read: the work of one script is bounded whatever the backlog
// (issue 25: one Peek(1) read every expired message in one script and held
// the server for seconds). Count never counts the expired ones.
func TestExpiredBacklogCostsBoundedWorkPerCall(t *testing.T) {
	s := startServer(t)
	prefix := testPrefix()
	fake := clock.NewFake(clock.Epoch)
	rdb := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := redis.New(rdb, redis.WithKeyPrefix(prefix), redis.WithClock(fake))
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const backlog = 3 * redis.SweepChunk

	for _, op := range []string{"peek", "get"} {
		q := mustQueue(t, c, "backlog-"+op)
		g, gctx := errgroup.WithContext(ctx)
		for w := range 8 {
			g.Go(func() error {
				for i := w; i < backlog; i += 8 {
					if _, err := q.Put(gctx, []byte(fmt.Sprint("expired ", i)), queue.PutOptions{TTL: time.Minute}); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		fake.Advance(2 * time.Minute)
		live := mustPut(t, q, "live", queue.PutOptions{})
		if n, err := q.Count(ctx); err != nil || n != 1 {
			t.Fatalf("%s: Count = %d, %v: want the live message only", op, n, err)
		}

		w := &scriptWork{z: prefix + "{backlog-" + op + "}:z", own: s.rdb}
		rdb.AddHook(w)
		s.resetStats()
		var got []*queue.Message
		var err error
		if op == "peek" {
			got, err = q.Peek(ctx, 1)
		} else {
			got, err = q.Get(ctx, 1, time.Minute)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != live {
			t.Fatalf("%s(1) behind %d expired messages returned %d messages, want the live one", op, backlog, len(got))
		}
		scripts, maxGone := w.take()
		stats := s.commandStats()
		t.Logf("%s(1) behind %d expired: %d scripts, at most %d entries dropped by one; %v", op, backlog, scripts, maxGone, stats)
		if scripts == 0 {
			t.Fatal("no script counted")
		}
		if hm := stats["hmget"]; hm > int64(scripts) {
			t.Errorf("%s(1): %d HMGET in %d scripts: a script read more than the one message asked for", op, hm, scripts)
		}
		if maxGone > redis.SweepChunk+1 {
			t.Errorf("%s(1): one script dropped %d expired messages, more than %d and the one it read", op, maxGone, redis.SweepChunk)
		}
		if n, err := q.Count(ctx); err != nil || n != 1 {
			t.Fatalf("%s: Count afterwards = %d, %v", op, n, err)
		}
	}
}
