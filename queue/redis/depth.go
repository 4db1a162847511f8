package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/adaptq/adaptq/queue/driver"
)

// depthScript: KEYS z, x; ARGV now. Returns {messages, hidden}: Count's
// number (ZCARD less the expired, not yet swept) and the messages whose
// visible-at is still ahead (a ZCOUNT), O(log n). A hidden message whose
// TTL passed is counted hidden until a call sweeps it, so the visible
// count (the difference) may be short by as many.
var depthScript = script(`
local now = clock(ARGV[1])
local total = redis.call('ZCARD', z) - redis.call('ZCOUNT', x, '-inf', now)
local hidden = redis.call('ZCOUNT', z, string.format('(%d', now), '+inf')
return {total, hidden}
`, luaKeys, luaClock)

var _ driver.DepthReader = (*redisQueue)(nil)

// Depth reads the visible and hidden messages in one script
// (driver.DepthReader). The oldest message's age is not known: the sorted
// set orders messages by visibility, not by insertion.
func (q *redisQueue) Depth(ctx context.Context) (driver.Depth, error) {
	v, err := q.again(ctx, depthScript, q.keys2, time.Time{}, q.c.now())
	if err != nil {
		return driver.Depth{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return driver.Depth{}, fmt.Errorf("unexpected reply %T to depth", v)
	}
	total, hidden := toInt(a[0]), toInt(a[1])
	hidden = min(hidden, max(total, 0))
	return driver.Depth{Visible: int(max(total-hidden, 0)), InFlight: int(hidden)}, nil
}
