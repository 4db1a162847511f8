package postgres

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue/driver"
)

// TestGetRowDecode (issue 34): a Get reads its rows' bytes itself
// (decodeGetRow) rather than through pgx's Scan; on every kind of message
// (no expiry, a TTL, metadata or none, an empty or a large body) the two
// readings of the same row agree, field for field, and the default pool's
// rows are the ones decodeGetRow reads.
func TestGetRowDecode(t *testing.T) {
	pq, _ := heldReceipts(t, "decode", 0)
	ctx := context.Background()
	big := make([]byte, 70_000)
	for i := range big {
		big[i] = byte(i)
	}
	reqs := []driver.PutRequest{
		{Body: []byte("plain")},
		{Body: []byte{}, Opts: driver.PutOptions{TTL: time.Hour}},
		{Body: big, Opts: driver.PutOptions{TTL: 90 * time.Second, Metadata: map[string]string{"k": "v", "é": "\"'\\"}}},
		{Body: []byte("meta only"), Opts: driver.PutOptions{Metadata: map[string]string{"traceparent": "00-1-2-01"}}},
	}
	for i := range reqs {
		if reqs[i].Opts.TTL == 0 {
			reqs[i].Opts.TTL = driver.NoExpiry
		}
	}
	if _, _, err := pq.PutBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	rows, err := pq.db.pool.Query(ctx, pq.db.sql.get, pq.db.nowArg(), pq.st.id, 10, int64(time.Hour/time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	fds := rows.FieldDescriptions()
	if !rawGetRows(fds) {
		t.Fatalf("the default pool's Get rows are not read raw: %+v", fds)
	}
	n := 0
	for rows.Next() {
		var raw, scan driver.Message
		id, receipt, meta, err := decodeGetRow(rows.RawValues(), fds, &raw)
		if err != nil {
			t.Fatal(err)
		}
		var sid, sreceipt int64
		var expires *time.Time
		var smeta []byte
		if err := rows.Scan(&sid, &sreceipt, &scan.DequeueCount, &scan.InsertedAt, &expires, &scan.NextVisibleAt, &scan.Body, &smeta); err != nil {
			t.Fatal(err)
		}
		if expires != nil {
			scan.ExpiresAt = *expires
		}
		if id != sid || receipt != sreceipt || string(meta) != string(smeta) || !reflect.DeepEqual(raw, scan) {
			t.Errorf("row %d: raw %d %x %q %+v\nscan %d %x %q %+v", n, id, receipt, meta, raw, sid, sreceipt, smeta, scan)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(reqs) {
		t.Fatalf("%d rows, want %d", n, len(reqs))
	}
}

// TestGetThroughScan: a pool whose rows decodeGetRow does not read (a
// program's own codecs) gets its messages through Scan, whole.
func TestGetThroughScan(t *testing.T) {
	scanGet.Store(true)
	defer scanGet.Store(false)
	pq, _ := heldReceipts(t, "scan", 0)
	ctx := context.Background()
	if _, err := pq.Put(ctx, []byte("x"), driver.PutOptions{TTL: time.Hour, Metadata: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pq.Put(ctx, []byte("y"), driver.PutOptions{TTL: driver.NoExpiry}); err != nil {
		t.Fatal(err)
	}
	ms, err := pq.Get(ctx, 2, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Get: %d, %v", len(ms), err)
	}
	if string(ms[0].Body) != "x" || ms[0].Metadata["k"] != "v" || ms[0].ExpiresAt.IsZero() || ms[0].DequeueCount != 1 || ms[0].PopReceipt == "" {
		t.Errorf("first: %+v", ms[0])
	}
	if string(ms[1].Body) != "y" || ms[1].Metadata != nil || !ms[1].ExpiresAt.IsZero() {
		t.Errorf("second: %+v", ms[1])
	}
}
