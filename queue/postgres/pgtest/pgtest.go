// Package pgtest finds the PostgreSQL server adaptq's tests run against and
// gives each test a schema of its own, dropped when the test ends.
//
// The server is ADAPTQ_TEST_POSTGRES_URL if set, else the machine's
// PostgreSQL on 127.0.0.1:5432 (trust auth, database test) as user
// postgres, then root. If none answers, tests skip with a message naming
// what was tried; under CI (CI=true) they fail instead, so a CI run never
// passes without the database. StartServer starts a server of a test's
// own, for the cases that restart or crash it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable that overrides the server's address.
const EnvURL = "ADAPTQ_TEST_POSTGRES_URL"

// Defaults are the addresses tried without EnvURL, in order.
var Defaults = []string{
	"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"postgres://root@127.0.0.1:5432/test?sslmode=disable",
}

var found struct {
	once sync.Once
	url  string
	err  error
}

// URL returns the server's connection URL (without adaptq's parameters),
// or skips the test (fails it under CI=true) if no server answers.
func URL(t testing.TB) string {
	t.Helper()
	u, err := Find()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: no PostgreSQL server, and CI=true: %v", err)
		}
		t.Skipf("pgtest: no PostgreSQL server (set %s, or start PostgreSQL on 127.0.0.1:5432 with a database test): %v", EnvURL, err)
	}
	return u
}

// Find returns the first server URL that answers.
func Find() (string, error) {
	found.once.Do(func() {
		cands := Defaults
		if u := os.Getenv(EnvURL); u != "" {
			cands = []string{u}
		}
		var errs []string
		for _, u := range cands {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, err := pgx.Connect(ctx, u)
			if err == nil {
				err = c.Ping(ctx)
				_ = c.Close(ctx)
			}
			cancel()
			if err == nil {
				found.url = u
				return
			}
			errs = append(errs, fmt.Sprintf("%s: %v", redact(u), err))
		}
		found.err = fmt.Errorf("%s", strings.Join(errs, "; "))
	})
	return found.url, found.err
}

func redact(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			if k := strings.Index(u[j+3:i], ":"); k >= 0 {
				return u[:j+3+k] + ":xxx" + u[i:]
			}
		}
	}
	return u
}

// Schema returns a fresh schema name for t, unique across runs (so
// -count=2 passes), and drops the schema with everything in it when the
// test ends. The schema itself is not created: adaptq's migrations do it.
func Schema(t testing.TB) string {
	t.Helper()
	u := URL(t)
	name := NewSchemaName()
	t.Cleanup(func() {
		if err := Drop(u, name); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// NewSchemaName is a unique schema name: "t_" and 16 random hex digits.
func NewSchemaName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "t_" + hex.EncodeToString(b[:])
}

// Drop drops a schema and everything in it.
func Drop(url, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

// QueueURL is the postgres:// URL of queue name in schema on the test
// server, with extra parameters (key=value&…) appended.
func QueueURL(t testing.TB, schema, name, extra string) string {
	t.Helper()
	u := URL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	u += sep + "queue=" + name + "&schema=" + schema
	if extra != "" {
		u += "&" + extra
	}
	return u
}
