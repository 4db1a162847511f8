package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/redis"
)

// RedisProbeResult is one drain of the Redis probe (issue 34).
type RedisProbeResult struct {
	Side    string
	Rate    float64 // messages drained a second
	ServerU float64 // Redis CPU µs per message drained (INFO cpu), the drain alone
	Detail  string  // Redis's own usec per call of the drain's commands
}

// RedisProbeSides: hand, PEERS.md's hand-written loop (8 goroutines, a
// zset by visible-at and a hash per message, one Lua script per get of 32
// and per batch delete); default, adaptq's driver under a listener with
// its default options; tasks4, section 12's 4 tasks of 48 slots.
var RedisProbeSides = []string{"hand", "default", "tasks4"}

var (
	handGet = goredis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 32)
local out = {}
for i, id in ipairs(ids) do
	redis.call('ZADD', KEYS[1], ARGV[2], id)
	local h = KEYS[2] .. id
	redis.call('HINCRBY', h, 'dc', 1)
	out[#out+1] = id
	out[#out+1] = redis.call('HGET', h, 'body')
end
return out`)
	handDel = goredis.NewScript(`
for i, id in ipairs(ARGV) do
	redis.call('ZREM', KEYS[1], id)
	redis.call('DEL', KEYS[2] .. id)
end
return #ARGV`)
)

// RedisProbe fills n messages of jsonBody's size (not timed) and drains
// them with side, measuring the rate and Redis's CPU over the drain.
func RedisProbe(ctx context.Context, side string, n int) (RedisProbeResult, error) {
	opt, err := goredis.ParseURL(redisURL())
	if err != nil {
		return RedisProbeResult{}, err
	}
	b := &redisBench{opt: opt, admin: goredis.NewClient(opt), prefix: fmt.Sprintf("adaptq-probe-%d:", time.Now().UnixNano())}
	defer b.admin.Close()
	defer b.cleanup(context.Background())
	rdb := b.newClient()
	defer rdb.Close()
	r := RedisProbeResult{Side: side}
	var d time.Duration
	var cpu float64
	var stats map[string]string
	switch side {
	case "hand":
		z, h := b.prefix+"z", b.prefix+"h:"
		for i := 0; i < n; i += 1000 {
			p := rdb.Pipeline()
			for j := i; j < min(n, i+1000); j++ {
				id := strconv.Itoa(j + 1)
				p.HSet(ctx, h+id, "body", jsonBody, "dc", 0)
				p.ZAdd(ctx, z, goredis.Z{Score: 0, Member: id})
			}
			if _, err := p.Exec(ctx); err != nil {
				return r, err
			}
		}
		_ = handGet.Load(ctx, rdb).Err()
		_ = handDel.Load(ctx, rdb).Err()
		b.admin.ConfigResetStat(ctx)
		cpu0 := b.redisCPU(ctx)
		var done atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, pgTasks)
		start := time.Now()
		for range pgTasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Load() < int64(n) {
					now := time.Now().UnixMilli()
					v, err := handGet.Run(ctx, rdb, []string{z, h}, now, now+30000).Slice()
					if err != nil {
						errs <- err
						return
					}
					if len(v) == 0 {
						continue
					}
					ids := make([]any, 0, len(v)/2)
					for i := 0; i < len(v); i += 2 {
						ids = append(ids, v[i])
					}
					if err := handDel.Run(ctx, rdb, []string{z, h}, ids...).Err(); err != nil {
						errs <- err
						return
					}
					done.Add(int64(len(ids)))
				}
			}()
		}
		wg.Wait()
		d = time.Since(start)
		cpu = b.redisCPU(ctx) - cpu0
		stats = commandStats(ctx, b.admin)
		select {
		case err := <-errs:
			return r, err
		default:
		}
	case "default", "tasks4":
		c := redis.New(rdb, redis.WithKeyPrefix(b.prefix))
		defer c.Close()
		q, err := c.Queue("probe")
		if err != nil {
			return r, err
		}
		defer q.Close()
		if err := fillParallel(ctx, q, n, 8, jsonBody); err != nil {
			return r, err
		}
		lo := listener.Options{}
		if side == "tasks4" {
			lo = listener.Options{Tasks: redisTasks, Concurrency: redisTasks * listenerSlotsPerTask}
		}
		b.admin.ConfigResetStat(ctx)
		cpu0 := b.redisCPU(ctx)
		d, _, err = drainListener(ctx, q, n, noop, lo, 10*time.Minute)
		if err != nil {
			return r, err
		}
		cpu = b.redisCPU(ctx) - cpu0
		stats = commandStats(ctx, b.admin)
		_ = queue.MaxBatchSize
	default:
		return r, fmt.Errorf("redisprobe: unknown side %q (want one of %v)", side, RedisProbeSides)
	}
	r.Rate = rate(n, d)
	r.ServerU = cpu * 1e6 / float64(n)
	var parts []string
	for k, v := range stats {
		parts = append(parts, k+" "+v)
	}
	r.Detail = strings.Join(parts, "; ")
	return r, nil
}

// commandStats is INFO commandstats' calls and usec of each command that
// ran (the admin connection's INFO and CONFIG left out).
func commandStats(ctx context.Context, rdb *goredis.Client) map[string]string {
	s, err := rdb.Info(ctx, "commandstats").Result()
	out := map[string]string{}
	if err != nil {
		return out
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "cmdstat_") {
			continue
		}
		k = strings.TrimPrefix(k, "cmdstat_")
		if k == "info" || k == "config|resetstat" || k == "config" {
			continue
		}
		var calls, usec string
		for _, f := range strings.Split(v, ",") {
			a, b, _ := strings.Cut(f, "=")
			switch a {
			case "calls":
				calls = b
			case "usec":
				usec = b
			}
		}
		out[k] = "calls=" + calls + " usec=" + usec
	}
	return out
}
