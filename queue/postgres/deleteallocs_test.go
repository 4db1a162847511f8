package postgres

import (
	"bytes"
	"context"
	"math"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/adaptq/adaptq/queue/driver"
)

// maxDeleteAllocsPerReceipt bounds what a DeleteBatch allocates for each
// receipt beyond the first (issue 34): 1.13 measured when pgx encoded the
// []int64 arrays (an interface box for every element above 255), 0.16
// with int8Array.
const maxDeleteAllocsPerReceipt = 0.5

// maxDeleteBytesPerReceipt bounds the bytes it allocates per further
// receipt: 94 measured (the parsed ids and receipts, the outcomes); 154
// when the delete group kept a copy of every call's receipts and pgx
// boxed the arrays' elements, 118 with the arrays sent as text.
const maxDeleteBytesPerReceipt = 110

// TestDeleteBatchAllocs: a DeleteBatch of held receipts, alone in its
// group, allocates at most maxDeleteAllocsPerReceipt times per receipt,
// measured as (DeleteBatch of 32 − DeleteBatch of 1) / 31. Background work (the pool, the
// sweep) only adds allocations, so the least of a few measurements is the
// call's own.
func TestDeleteBatchAllocs(t *testing.T) {
	const tries = 5
	pq, rs := heldReceipts(t, "delallocs", 33*tries)
	ctx := context.Background()
	var bytes1, bytes32 uint64 = ^uint64(0), ^uint64(0)
	measure := func(batch []driver.Receipt) uint64 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		res, err := pq.DeleteBatch(ctx, batch)
		runtime.ReadMemStats(&m1)
		if len(batch) == 1 {
			bytes1 = min(bytes1, m1.TotalAlloc-m0.TotalAlloc)
		} else {
			bytes32 = min(bytes32, m1.TotalAlloc-m0.TotalAlloc)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range res {
			if e != nil {
				t.Fatalf("receipt %d: %v", i, e)
			}
		}
		return m1.Mallocs - m0.Mallocs
	}
	one, many := ^uint64(0), ^uint64(0)
	for i := range tries {
		one = min(one, measure(rs[i*33:i*33+1]))
		many = min(many, measure(rs[i*33+1:i*33+33]))
	}
	per := (float64(many) - float64(one)) / 31
	perBytes := (float64(bytes32) - float64(bytes1)) / 31
	t.Logf("DeleteBatch of 1: %d allocations, of 32: %d: %.2f per further receipt; bytes %d, %d: %.0f per further receipt", one, many, per, bytes1, bytes32, perBytes)
	if per > maxDeleteAllocsPerReceipt {
		t.Fatalf("a DeleteBatch allocates %.2f times per receipt, want at most %.2f", per, maxDeleteAllocsPerReceipt)
	}
	if perBytes > maxDeleteBytesPerReceipt {
		t.Fatalf("a DeleteBatch allocates %.0f bytes per receipt, want at most %d", perBytes, maxDeleteBytesPerReceipt)
	}
}

// TestInt8ArrayEncoding: pgx encodes an int8Array exactly as it encodes
// the []int64, in binary and in text, empty or not, at the int64's ends;
// its Value (for statements sent without parameter types) is that text.
func TestInt8ArrayEncoding(t *testing.T) {
	m := pgtype.NewMap()
	for _, vs := range [][]int64{{}, {1}, {0, -1, 255, 256, math.MaxInt64, math.MinInt64, noReceipt, 12345678901}} {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, err := m.Encode(pgtype.Int8ArrayOID, format, vs, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Encode(pgtype.Int8ArrayOID, format, int8Array(vs), nil)
			if err != nil {
				t.Fatalf("%v (format %d): %v", vs, format, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%v (format %d): %x, want %x", vs, format, got, want)
			}
			if format == pgtype.TextFormatCode {
				if v, err := int8Array(vs).Value(); err != nil || v != string(want) {
					t.Errorf("%v: Value %q, %v; want %q", vs, v, err, want)
				}
			}
		}
	}
}
