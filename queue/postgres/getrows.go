package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/adaptq/adaptq/queue/driver"
)

// getColumns are the types of a Get's columns, in order: id, receipt,
// dequeue_count, inserted_at, expires_at (NULL: none), visible_at, body,
// meta (NULL: none).
var getColumns = [...]uint32{
	pgtype.Int8OID, pgtype.Int8OID, pgtype.Int4OID,
	pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID,
	pgtype.ByteaOID, pgtype.JSONBOID,
}

// scanGet makes Get read its rows through pgx's Scan; tests set it to
// compare the two readings.
var scanGet atomic.Bool

// rawGetRows reports whether a Get's rows, as the server describes them,
// are what decodeGetRow reads: the columns of getColumns, every one in
// binary but meta (pgx asks jsonb as text; either is read). A pool whose
// type map asks otherwise (a program's AfterConnect can register its own
// codecs) is read through Scan.
func rawGetRows(fds []pgconn.FieldDescription) bool {
	if scanGet.Load() || len(fds) != len(getColumns) {
		return false
	}
	for i, fd := range fds {
		if fd.DataTypeOID != getColumns[i] {
			return false
		}
		if fd.Format != pgtype.BinaryFormatCode && !(i == 7 && fd.Format == pgtype.TextFormatCode) {
			return false
		}
	}
	return true
}

var errGetRow = errors.New("postgres: a Get's row is not what its statement returns")

// decodeGetRow reads one of a Get's rows from its raw values (see
// rawGetRows) into m, as Scan would, without its per-column dispatch: the
// id and receipt, and meta's JSON (nil for NULL, aliasing vals: decode it
// before the next row).
func decodeGetRow(vals [][]byte, fds []pgconn.FieldDescription, m *driver.Message) (id, receipt int64, meta []byte, err error) {
	if len(vals) != len(getColumns) {
		return 0, 0, nil, fmt.Errorf("%w: %d columns", errGetRow, len(vals))
	}
	if len(vals[0]) != 8 || len(vals[1]) != 8 || len(vals[2]) != 4 {
		return 0, 0, nil, fmt.Errorf("%w: id, receipt or dequeue count of %d, %d, %d bytes", errGetRow, len(vals[0]), len(vals[1]), len(vals[2]))
	}
	id = int64(binary.BigEndian.Uint64(vals[0]))
	receipt = int64(binary.BigEndian.Uint64(vals[1]))
	m.DequeueCount = int(int32(binary.BigEndian.Uint32(vals[2])))
	if m.InsertedAt, err = decodeTime(vals[3]); err != nil {
		return 0, 0, nil, err
	}
	if vals[4] != nil { // NULL: no expiry, the zero time
		if m.ExpiresAt, err = decodeTime(vals[4]); err != nil {
			return 0, 0, nil, err
		}
	}
	if m.NextVisibleAt, err = decodeTime(vals[5]); err != nil {
		return 0, 0, nil, err
	}
	if vals[6] == nil {
		return 0, 0, nil, fmt.Errorf("%w: NULL body", errGetRow)
	}
	m.Body = make([]byte, len(vals[6]))
	copy(m.Body, vals[6])
	if meta = vals[7]; meta != nil && fds[7].Format == pgtype.BinaryFormatCode {
		// jsonb's binary form: a version byte, 1, then the text.
		if len(meta) == 0 || meta[0] != 1 {
			return 0, 0, nil, fmt.Errorf("%w: jsonb of version %v", errGetRow, meta[:min(1, len(meta))])
		}
		meta = meta[1:]
	}
	return id, receipt, meta, nil
}

// The binary timestamptz: microseconds since 2000-01-01 UTC, infinity as
// the extreme int64s.
const (
	y2kUnixMicros = 946_684_800 * 1_000_000
)

// decodeTime reads a finite binary timestamptz as pgx does (time.Unix, the
// local zone).
func decodeTime(b []byte) (time.Time, error) {
	if len(b) != 8 {
		return time.Time{}, fmt.Errorf("%w: a timestamptz of %d bytes", errGetRow, len(b))
	}
	us := int64(binary.BigEndian.Uint64(b))
	if us == 1<<63-1 || us == -1<<63 {
		return time.Time{}, fmt.Errorf("%w: an infinite timestamptz", errGetRow)
	}
	return time.Unix(y2kUnixMicros/1_000_000+us/1_000_000, (y2kUnixMicros%1_000_000*1_000)+(us%1_000_000*1_000)), nil
}
