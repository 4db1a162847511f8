//go:build !unix

package pgtest

import (
	"os"
	"testing"
)

// Server is a PostgreSQL server of a test's own (see server.go); this
// system cannot start one.
type Server struct {
	// URL connects to it.
	URL string
}

// StartServer skips the test (fails it under CI=true): the server of a
// test's own needs a Unix system.
func StartServer(t testing.TB, settings ...string) *Server {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("pgtest: a server of the test's own needs a Unix system, and CI=true")
	}
	t.Skip("pgtest: a server of the test's own needs a Unix system")
	return nil
}

// Restart is never reached: StartServer skips.
func (s *Server) Restart(t testing.TB, crash bool) { t.Helper() }
