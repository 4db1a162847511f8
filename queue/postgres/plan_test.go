package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// planScans runs stmt under EXPLAIN (ANALYZE, FORMAT JSON) with the
// generic plan the driver uses, in a transaction it rolls back, and
// returns every scan node of a table, in plan order.
func planScans(t *testing.T, db *DB, stmt string, args ...any) []scanNode {
	t.Helper()
	ctx := context.Background()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+stmt, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	var scans []scanNode
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if rel, ok := v["Relation Name"].(string); ok {
				if typ, _ := v["Node Type"].(string); strings.HasSuffix(typ, "Scan") {
					alias, _ := v["Alias"].(string)
					loops, _ := v["Actual Loops"].(float64)
					scans = append(scans, scanNode{typ + " on " + rel, alias, int(loops)})
				}
			}
			for _, k := range []string{"Plan", "Plans"} {
				if x, ok := v[k]; ok {
					walk(x)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return scans
}

// scanNode is a scan of a table in a plan: "Tid Scan on messages", the
// statement's alias of the table, and how many times it ran.
type scanNode struct {
	what, alias string
	loops       int
}

func (n scanNode) String() string { return n.what }

// filledQueue opens queue name in a schema of its own and puts n messages
// (in batches); with analyze, it analyzes the tables, as autovacuum does
// some time after a fill.
func filledQueue(t *testing.T, name string, n int, analyze bool) *pgQueue {
	t.Helper()
	ctx := context.Background()
	db, err := Open(ctx, pgtest.URL(t), WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	q, err := db.queue(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for n > 0 {
		reqs := make([]driver.PutRequest, min(n, 1000))
		for i := range reqs {
			reqs[i] = driver.PutRequest{Body: []byte("x"), Opts: driver.PutOptions{TTL: time.Hour}}
		}
		if _, _, err := q.PutBatch(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		n -= len(reqs)
	}
	if analyze {
		s := quoteIdent(db.schema)
		if _, err := db.pool.Exec(ctx, `ANALYZE `+s+`.messages, `+s+`.bodies`); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// TestGetUpdatesByTID (issue 34): a Get's update reaches the rows it
// locked by their ctid, a TID scan, with no index descent per message
// (before the tables were analyzed, the plan joined them by id through
// messages_pkey), whether or not the tables have statistics. A batch
// delete whose receipts all delete their messages looks none of them up
// again.
func TestGetUpdatesByTID(t *testing.T) {
	for _, analyze := range []bool{false, true} {
		t.Run(fmt.Sprint("analyze=", analyze), func(t *testing.T) { testGetUpdatesByTID(t, analyze) })
	}
}

func testGetUpdatesByTID(t *testing.T, analyze bool) {
	q := filledQueue(t, "tid", 5000, analyze)
	db := q.db
	get := planScans(t, db, db.sql.get, db.nowArg(), q.st.id, queue.MaxBatchSize, int64(30e6))
	update := ""
	for _, n := range get {
		if n.alias == "m" {
			update = n.what
		}
	}
	if update != "Tid Scan on messages" {
		t.Errorf("the Get's update reads its rows with %q, want a Tid Scan on messages (all scans: %v)", update, get)
	}
	ms, err := q.Get(context.Background(), queue.MaxBatchSize, time.Hour)
	if err != nil || len(ms) != queue.MaxBatchSize {
		t.Fatalf("Get: %d, %v", len(ms), err)
	}
	ids := make([]int64, len(ms))
	rs := make([]int64, len(ms))
	for i, m := range ms {
		ids[i], _ = parseID(m.ID)
		rs[i], _ = parseReceipt(m.PopReceipt)
	}
	lookups := -1
	for _, n := range planScans(t, db, db.sql.delBatch, db.nowArg(), q.st.id, ids, rs) {
		if n.alias == "e" {
			lookups = n.loops
		}
	}
	if lookups != 0 {
		t.Errorf("a batch delete of %d held messages looked messages up %d times after deleting them, want 0", len(ms), lookups)
	}
}

// TestDeleteBatchForeignReceipts: receipts that do not parse, or that
// parse to the value sent for those (noReceipt), delete nothing and fail
// as a Delete of them does: a receipt mismatch while the message is held,
// not found for an id that names none; the messages stay, and their own
// receipts still delete them. With every id distinct (no map) and with
// one repeated (the path that sends each receipt once).
func TestDeleteBatchForeignReceipts(t *testing.T) {
	for _, repeat := range []bool{false, true} {
		t.Run(fmt.Sprint("repeat=", repeat), func(t *testing.T) {
			pq, rs := heldReceipts(t, "foreign", 3)
			ctx := context.Background()
			batch := []driver.Receipt{
				{ID: rs[0].ID, PopReceipt: "not-a-receipt"},
				{ID: rs[1].ID, PopReceipt: formatReceipt(noReceipt)},
				{ID: "nope", PopReceipt: rs[2].PopReceipt},
				{ID: rs[2].ID, PopReceipt: rs[2].PopReceipt},
			}
			if repeat {
				batch = append(batch, rs[2])
			}
			res, err := pq.DeleteBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			want := []error{queue.ErrReceiptMismatch, queue.ErrReceiptMismatch, queue.ErrNotFound, nil}
			if repeat {
				want = append(want, queue.ErrNotFound)
			}
			if len(res) != len(want) {
				t.Fatalf("%d results for %d receipts", len(res), len(want))
			}
			for i, w := range want {
				if (w == nil) != (res[i] == nil) || (w != nil && !errors.Is(res[i], w)) {
					t.Errorf("receipt %d: %v, want %v", i, res[i], w)
				}
			}
			res, err = pq.DeleteBatch(ctx, rs[:2])
			if err != nil || res[0] != nil || res[1] != nil {
				t.Fatalf("the messages' own receipts after the batch: %v, %v", res, err)
			}
		})
	}
}

// TestReceiptFormat: receipts are 16 lower-case hex digits of the int64's
// bits, as they always were, and read back.
func TestReceiptFormat(t *testing.T) {
	for _, r := range []int64{0, 1, -1, 0x1f, math.MaxInt64, math.MinInt64, -9e18, 9e18} {
		s := formatReceipt(r)
		if want := fmt.Sprintf("%016x", uint64(r)); s != want {
			t.Errorf("formatReceipt(%d) = %q, want %q", r, s, want)
		}
		if back, ok := parseReceipt(s); !ok || back != r {
			t.Errorf("parseReceipt(%q) = %d, %v; want %d", s, back, ok, r)
		}
		// A Get formats the id and the receipt together: the same strings.
		for _, id := range []int64{1, 42, math.MaxInt64, math.MinInt64} {
			if gi, gr := formatIDReceipt(id, r); gi != strconv.FormatInt(id, 10) || gr != s {
				t.Errorf("formatIDReceipt(%d, %d) = %q, %q; want %q, %q", id, r, gi, gr, strconv.FormatInt(id, 10), s)
			}
		}
	}
	// parseReceipt accepts what strconv.ParseUint(s, 16, 64) did, at 16
	// characters.
	for _, s := range []string{"00000000000000FF", "ABCDEFabcdef0123", "000000000000000g", "+000000000000001",
		"-000000000000001", "0x00000000000001", "0000_00000000001", "000000000000000 ", "ffffffffffffffff", "fffffffffffffff", "/:@G`g0000000000"} {
		got, ok := parseReceipt(s)
		u, err := strconv.ParseUint(s, 16, 64)
		if wantOK := err == nil && len(s) == 16; ok != wantOK || (ok && got != int64(u)) {
			t.Errorf("parseReceipt(%q) = %d, %v; ParseUint: %d, %v", s, got, ok, u, err)
		}
	}
}
