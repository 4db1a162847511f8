package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestGetTimesAnyEraAndZone: a Get's times are exact, read raw or through
// Scan, in binary or text (the server's TimeZone then writes them), before
// 1970 and 2000 and far ahead.
func TestGetTimesAnyEraAndZone(t *testing.T) {
	defer scanGet.Store(false)
	for _, start := range []time.Time{time.Date(1960, 6, 15, 12, 0, 0, 123456000, time.UTC), time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC), time.Date(9000, 1, 1, 0, 0, 0, 1000, time.UTC)} {
		for _, extra := range []string{"", "&options=-c%20TimeZone%3DAsia/Kathmandu", "&default_query_exec_mode=simple_protocol&options=-c%20TimeZone%3DAsia/Kathmandu", "&default_query_exec_mode=exec&options=-c%20TimeZone%3DAmerica/St_Johns"} {
			for _, scan := range []bool{false, true} {
				scanGet.Store(scan)
				ctx := context.Background()
				c := clock.NewFake(start)
				db, err := Open(ctx, pgtest.URL(t)+extra, WithSchema(pgtest.Schema(t)), WithClock(c))
				if err != nil {
					t.Fatal(err)
				}
				pq, err := db.queue(ctx, "times")
				if err != nil {
					t.Fatal(start, extra, err)
				}
				if _, err := pq.Put(ctx, []byte("x"), driver.PutOptions{TTL: 90 * time.Minute}); err != nil {
					t.Fatal(err)
				}
				ms, err := pq.Get(ctx, 1, 7*time.Second)
				if err != nil || len(ms) != 1 {
					t.Fatalf("%v %s %v: %v %v", start, extra, scan, ms, err)
				}
				m := ms[0]
				if !m.InsertedAt.Equal(start) || !m.ExpiresAt.Equal(start.Add(90*time.Minute)) || !m.NextVisibleAt.Equal(start.Add(7*time.Second)) {
					t.Errorf("%v %s %v: %v %v %v", start, extra, scan, m.InsertedAt, m.ExpiresAt, m.NextVisibleAt)
				}
				db.Close()
			}
		}
	}
}
