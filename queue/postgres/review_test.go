package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestDeleteBatchOverflowingID: a receipt whose id is no id (a number past
// int64) deletes nothing, in a batch as alone, even when the receipt is
// that of the message with the highest id (the one ParseInt's overflow
// answer names).
func TestDeleteBatchOverflowingID(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, pgtest.URL(t), WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pq, err := db.queue(ctx, "overflow")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `ALTER TABLE `+quoteIdent(db.schema)+`.messages ALTER COLUMN id RESTART WITH `+strconv.FormatInt(math.MaxInt64, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := pq.Put(ctx, []byte("last"), driver.PutOptions{TTL: driver.NoExpiry}); err != nil {
		t.Fatal(err)
	}
	ms, err := pq.Get(ctx, 1, time.Hour)
	if err != nil || len(ms) != 1 || ms[0].ID != strconv.FormatInt(math.MaxInt64, 10) {
		t.Fatalf("Get: %v, %v", ms, err)
	}
	for _, id := range []string{"9223372036854775808", "99999999999999999999"} {
		if err := pq.Delete(ctx, id, ms[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Delete(%s): %v, want ErrNotFound", id, err)
		}
		res, err := pq.DeleteBatch(ctx, []driver.Receipt{{ID: id, PopReceipt: ms[0].PopReceipt}})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(res[0], queue.ErrNotFound) {
			t.Errorf("DeleteBatch(%s): %v, want ErrNotFound", id, res[0])
		}
	}
	if n, err := pq.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count: %d, %v; want the message still there", n, err)
	}
	res, err := pq.DeleteBatch(ctx, []driver.Receipt{{ID: ms[0].ID, PopReceipt: ms[0].PopReceipt}})
	if err != nil || res[0] != nil {
		t.Fatalf("DeleteBatch with its own id: %v, %v", res, err)
	}
}

// TestExecModes: every query exec mode a URL may name
// (default_query_exec_mode) gets, decodes and deletes the same messages:
// the text-format modes are read through Scan, the binary ones raw.
func TestExecModes(t *testing.T) {
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			c := clock.NewFake(clock.Epoch)
			db, err := Open(ctx, pgtest.URL(t)+"&default_query_exec_mode="+mode, WithSchema(pgtest.Schema(t)), WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			pq, err := db.queue(ctx, "modes")
			if err != nil {
				t.Fatal(err)
			}
			other, err := db.queue(ctx, "other")
			if err != nil {
				t.Fatal(err)
			}
			bin := make([]byte, 256)
			for i := range bin {
				bin[i] = byte(i)
			}
			reqs := []driver.PutRequest{
				{Body: []byte("a"), Opts: driver.PutOptions{TTL: driver.NoExpiry, Metadata: map[string]string{"k": "v"}}},
				{Body: []byte{}, Opts: driver.PutOptions{TTL: time.Hour}},
				{Body: bin, Opts: driver.PutOptions{TTL: 90 * time.Second}},
			}
			if _, _, err := pq.PutBatch(ctx, reqs); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Put(ctx, []byte("o"), driver.PutOptions{TTL: driver.NoExpiry}); err != nil {
				t.Fatal(err)
			}
			ms, err := pq.Get(ctx, 10, time.Hour)
			if err != nil || len(ms) != 3 {
				t.Fatalf("Get: %d, %v", len(ms), err)
			}
			for i, m := range ms {
				want := c.Now().Add(reqs[i].Opts.TTL)
				if reqs[i].Opts.TTL == driver.NoExpiry {
					want = time.Time{}
				}
				if string(m.Body) != string(reqs[i].Body) || m.DequeueCount != 1 ||
					!m.InsertedAt.Equal(c.Now()) || !m.NextVisibleAt.Equal(c.Now().Add(time.Hour)) || !m.ExpiresAt.Equal(want) ||
					len(m.Metadata) != len(reqs[i].Opts.Metadata) || m.Metadata["k"] != reqs[i].Opts.Metadata["k"] {
					t.Errorf("message %d: %+v", i, m)
				}
			}
			os, err := other.Get(ctx, 1, time.Hour)
			if err != nil || len(os) != 1 {
				t.Fatalf("other Get: %d, %v", len(os), err)
			}
			stale := []byte(ms[1].PopReceipt)
			stale[15] ^= 1
			res, err := pq.DeleteBatch(ctx, []driver.Receipt{
				{ID: ms[0].ID, PopReceipt: ms[0].PopReceipt},
				{ID: ms[1].ID, PopReceipt: string(stale)},
				{ID: os[0].ID, PopReceipt: os[0].PopReceipt},
				{ID: "x", PopReceipt: ms[2].PopReceipt},
				{ID: ms[2].ID, PopReceipt: ms[2].PopReceipt},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res[0] != nil || !errors.Is(res[1], queue.ErrReceiptMismatch) || !errors.Is(res[2], queue.ErrNotFound) ||
				!errors.Is(res[3], queue.ErrNotFound) || res[4] != nil {
				t.Errorf("DeleteBatch: %v", res)
			}
			if n, err := pq.Count(ctx); err != nil || n != 1 {
				t.Errorf("Count: %d, %v; want 1", n, err)
			}
			if n, err := other.Count(ctx); err != nil || n != 1 {
				t.Errorf("other Count: %d, %v; want 1", n, err)
			}
		})
	}
}

// binaryJSONB is pgx's jsonb codec asking for the binary format.
type binaryJSONB struct{ *pgtype.JSONBCodec }

func (binaryJSONB) PreferredFormat() int16 { return pgtype.BinaryFormatCode }

// textInt8 is pgx's int8 codec asking for the text format.
type textInt8 struct{ pgtype.Int8Codec }

func (textInt8) PreferredFormat() int16 { return pgtype.TextFormatCode }

// TestCustomCodecs: a pool whose AfterConnect registers codecs of its own
// (jsonb in binary, int8 in text, timestamptz scanned in UTC) gets the
// same messages: read raw when the row description still is the expected
// one, through Scan when not.
func TestCustomCodecs(t *testing.T) {
	for name, reg := range map[string]func(*pgtype.Map){
		"jsonb-binary": func(m *pgtype.Map) {
			m.RegisterType(&pgtype.Type{Name: "jsonb", OID: pgtype.JSONBOID, Codec: binaryJSONB{&pgtype.JSONBCodec{Marshal: json.Marshal, Unmarshal: json.Unmarshal}}})
		},
		"int8-text": func(m *pgtype.Map) {
			m.RegisterType(&pgtype.Type{Name: "int8", OID: pgtype.Int8OID, Codec: textInt8{}})
		},
		"timestamptz-utc": func(m *pgtype.Map) {
			m.RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID, Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error { reg(c.TypeMap()); return nil }
			c := clock.NewFake(clock.Epoch)
			db, err := OpenConfig(ctx, cfg, WithSchema(pgtest.Schema(t)), WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			pq, err := db.queue(ctx, "codecs")
			if err != nil {
				t.Fatal(err)
			}
			reqs := []driver.PutRequest{
				{Body: []byte("a"), Opts: driver.PutOptions{TTL: driver.NoExpiry, Metadata: map[string]string{"k": "v"}}},
				{Body: []byte{0, 1, 2}, Opts: driver.PutOptions{TTL: time.Hour}},
			}
			ids, _, err := pq.PutBatch(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := pq.Get(ctx, 10, time.Hour)
			if err != nil || len(ms) != 2 {
				t.Fatalf("Get: %d, %v", len(ms), err)
			}
			for i, m := range ms {
				want := c.Now().Add(reqs[i].Opts.TTL)
				if reqs[i].Opts.TTL == driver.NoExpiry {
					want = time.Time{}
				}
				if m.ID != ids[i] || string(m.Body) != string(reqs[i].Body) || m.DequeueCount != 1 || !m.InsertedAt.Equal(c.Now()) ||
					!m.ExpiresAt.Equal(want) || m.Metadata["k"] != reqs[i].Opts.Metadata["k"] || len(m.Metadata) != len(reqs[i].Opts.Metadata) {
					t.Errorf("message %d: %+v", i, m)
				}
			}
			res, err := pq.DeleteBatch(ctx, []driver.Receipt{{ID: ms[0].ID, PopReceipt: ms[0].PopReceipt}, {ID: ms[1].ID, PopReceipt: ms[1].PopReceipt}})
			if err != nil || res[0] != nil || res[1] != nil {
				t.Fatalf("DeleteBatch: %v, %v", res, err)
			}
			if n, err := pq.Count(ctx); err != nil || n != 0 {
				t.Fatalf("Count: %d, %v", n, err)
			}
		})
	}
}

// TestVacuumDespiteAStrandedLock: behind PgBouncer in transaction pooling
// (which the package doc supports for everything but LISTEN), a session
// advisory lock taken by one statement and released by another stays on
// whichever server connection took it, for as long as that connection
// lives: Vacuum must not take such a lock held by no vacuum for a vacuum
// under way, and skip its turn for good. Here an idle session holds what
// the stranded lock was, and Vacuum still vacuums.
func TestVacuumDespiteAStrandedLock(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	db, err := Open(ctx, pgtest.URL(t), WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// The lock Vacuum took before: "avac" and the schema's name.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, 0x61766163, schema); err != nil {
		t.Fatal(err)
	}
	vacuums := func() (n int64) {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'messages'`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := vacuums()
	if err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if after := vacuums(); after != before+1 {
		t.Fatalf("messages vacuumed %d times by Vacuum, want 1", after-before)
	}
}
