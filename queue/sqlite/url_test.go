package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
)

func TestOpenURLSharesOneDB(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	abs := filepath.Join(dir, "data", "adaptq.db")

	a, err := queue.Open(ctx, "sqlite://"+abs+"?queue=orders")
	if err != nil {
		t.Fatal(err)
	}
	// The same file by a relative path (Host "." + Path) and with options.
	b, err := queue.Open(ctx, "sqlite://./data/adaptq.db?queue=orders&busy_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	c, err := queue.Open(ctx, "sqlite://data/../data/adaptq.db?queue=invoices")
	if err != nil {
		t.Fatal(err)
	}
	var da, db, dc *DB
	if !a.As(&da) || !b.As(&db) || !c.As(&dc) {
		t.Fatal("As gave no *DB")
	}
	if da != db || da != dc {
		t.Fatal("URLs naming one file opened separate DBs")
	}
	if da.Path() != abs {
		t.Fatalf("DB path = %q, want %q", da.Path(), abs)
	}
	if _, err := a.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Count(ctx); err != nil || n != 1 {
		t.Fatalf("second handle counts %d, %v", n, err)
	}
	if n, err := c.Count(ctx); err != nil || n != 0 {
		t.Fatalf("other queue counts %d, %v", n, err)
	}

	// Closing handles releases the DB only with the last one.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil { // twice: no double release
		t.Fatal(err)
	}
	if _, err := b.Count(ctx); err != nil {
		t.Fatalf("DB closed while handles remain: %v", err)
	}
	b.Close()
	if _, err := c.Count(ctx); err != nil {
		t.Fatalf("DB closed while a handle remains: %v", err)
	}
	c.Close()
	if !da.closed.Load() {
		t.Fatal("DB still open after its last URL handle closed")
	}
	shared.Lock()
	n := len(shared.dbs)
	shared.Unlock()
	if n != 0 {
		t.Fatalf("%d shared DBs left", n)
	}

	// Opening again reopens the file.
	d, err := queue.Open(ctx, "sqlite://"+abs+"?queue=orders")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if n, err := d.Count(ctx); err != nil || n != 1 {
		t.Fatalf("after reopen count = %d, %v; want 1", n, err)
	}
}

func TestOpenURLErrors(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "x.db")
	for _, tc := range []struct {
		url    string
		target error
		says   string
	}{
		{"sqlite://" + db + "?queue=orders&ttl=1h", queue.ErrInvalidURL, `"ttl"`},
		{"sqlite://" + db + "?queue=orders&_txlock=deferred", queue.ErrInvalidURL, `"_txlock"`},
		{"sqlite://" + db, queue.ErrInvalidURL, `"queue" parameter`},
		{"sqlite://" + db + "?queue=", queue.ErrInvalidURL, `"queue" parameter`},
		{"sqlite://" + db + "?queue=a1&queue=b2", queue.ErrInvalidURL, `given 2 times`},
		{"sqlite://?queue=orders", queue.ErrInvalidURL, "database file path"},
		{"sqlite:///?queue=orders", queue.ErrInvalidURL, "database file path"},
		{"sqlite:" + db + "?queue=orders", queue.ErrInvalidURL, "write sqlite://" + db}, // one slash
		{"sqlite://" + db + "?queue=Orders", queue.ErrInvalidName, `"Orders"`},
		{"sqlite://" + db + "?queue=ab", queue.ErrInvalidName, `"ab"`},
		{"sqlite://" + db + "?queue=orders&busy_timeout=5", queue.ErrInvalidURL, `"5"`},
		{"sqlite://" + db + "?queue=orders&busy_timeout=-1s", queue.ErrInvalidURL, `"-1s"`},
		{"sqlite://" + db + "?queue=orders&sync=off", queue.ErrInvalidURL, `"off"`},
		{"sqlite://" + db + "?queue=orders&sync=full&sync=full", queue.ErrInvalidURL, `given 2 times`},
	} {
		q, err := queue.Open(ctx, tc.url)
		if !errors.Is(err, tc.target) {
			if q != nil {
				q.Close()
			}
			t.Errorf("Open(%q) = %v, want %v", tc.url, err, tc.target)
			continue
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Open(%q) error %q does not say %s", tc.url, err, tc.says)
		}
	}
	// None of them created the file or left a DB open.
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("a rejected URL created %s", db)
	}
	shared.Lock()
	defer shared.Unlock()
	if len(shared.dbs) != 0 {
		t.Errorf("%d shared DBs left open", len(shared.dbs))
	}
}
