package adaptq

import (
	"net"

	"github.com/adaptq/adaptq/internal/testutil"
)

func newLocalListener() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// The admin endpoint's test helpers, shared with package admin's tests.
var (
	adminSend     = testutil.Send
	adminRequest  = testutil.Request
	bearer        = testutil.Bearer
	pageRequest   = testutil.PageRequest
	sessionCookie = testutil.SessionCookie
)
