package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// serverError is an error reply as go-redis returns them.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

var _ goredis.Error = serverError("")

func TestClassify(t *testing.T) {
	cases := []struct {
		err       error
		transient bool
	}{
		{serverError("LOADING Redis is loading the dataset in memory"), true},
		{serverError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{serverError("READONLY You can't write against a read only replica."), true},
		{serverError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{serverError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{serverError("CLUSTERDOWN The cluster is down"), true},
		{fmt.Errorf("get: %w", serverError("LOADING Redis is loading")), true},
		{serverError("ERR Error running script: attempt to compare nil"), false},
		{serverError("NOPERM this user has no permissions"), false},
		{serverError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{serverError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{goredis.ErrPoolTimeout, true},
		{goredis.ErrClosed, false},
		{context.Canceled, false},
		{errors.New("something else"), false},
	}
	for _, c := range cases {
		if got, _ := Classify(c.err); got != c.transient {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.transient)
		}
	}
	if _, after := Classify(serverError("LOADING x")); after != time.Second {
		t.Errorf("LOADING's hint = %s, want 1s", after)
	}
}
