package postgres

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestDecodeTimeAsPgx: decodeTime reads every finite binary timestamptz
// (before 1970 and 2000, fractions of a second either side of zero, the
// server's extremes) as pgx's codec does.
func TestDecodeTimeAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	for _, us := range []int64{0, 1, -1, 999_999, -999_999, 1_000_000, -1_000_001, -946_684_800_000_001, -946_684_800_000_000 - 1_500_000,
		-211_813_488_000_000_000, 9_224_318_015_999_999, 850_000_000_123_456} {
		b := binary.BigEndian.AppendUint64(nil, uint64(us))
		var want time.Time
		if err := m.Scan(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, b, &want); err != nil {
			t.Fatal(err)
		}
		got, err := decodeTime(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d µs: %v, pgx %v", us, got, want)
		}
	}
}
