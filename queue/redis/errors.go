package redis

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue/driver"
)

// transientCodes are the error codes with which Redis says "not now": a
// retry, after a while, may succeed.
//
//	LOADING      the server is loading its data set after a restart
//	BUSY         a script runs for longer than busy-reply-threshold
//	READONLY     the node is a replica now, after a failover
//	MASTERDOWN   a replica lost its master (replica-serve-stale-data no)
//	TRYAGAIN     a cluster slot is being migrated
//	CLUSTERDOWN  the cluster has no quorum or uncovered slots
//	NOREPLICAS   min-replicas-to-write is not met
//
// MOVED and ASK are not among them: a client that is not a cluster client
// gets them again on every retry.
var transientCodes = map[string]time.Duration{
	"LOADING":     time.Second,
	"BUSY":        time.Second,
	"READONLY":    time.Second,
	"MASTERDOWN":  time.Second,
	"TRYAGAIN":    100 * time.Millisecond,
	"CLUSTERDOWN": time.Second,
	"NOREPLICAS":  time.Second,
}

// Classify says whether a retry of a call that failed with err may
// succeed: the server's transient error codes (transientCodes), a lost or
// refused connection (io.EOF when the server closes it), a full connection
// pool, and what driver.DefaultClassify covers. The hint is a pause long
// enough for a restart's loading or a failover to make progress.
func Classify(err error) (transient bool, retryAfter time.Duration) {
	if err == nil || errors.Is(err, context.Canceled) {
		return false, 0
	}
	var re goredis.Error
	if errors.As(err, &re) {
		code, _, _ := strings.Cut(strings.TrimPrefix(re.Error(), "ERR "), " ")
		if d, ok := transientCodes[code]; ok {
			return true, d
		}
		return false, 0
	}
	switch {
	case errors.Is(err, goredis.ErrClosed):
		return false, 0
	case errors.Is(err, io.EOF), errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted):
		return true, 0
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true, 0
	}
	return driver.DefaultClassify(err)
}
