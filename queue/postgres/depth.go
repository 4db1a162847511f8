package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/adaptq/adaptq/queue/driver"
)

// depthSQL reads a queue's depth in one statement, so in one snapshot: the
// total from the counter rows (O(1), as Count), the messages hidden now (a
// range of messages_ready: as many as consumers hold, plus those put with
// a delay) and the insertion time of the oldest unexpired message (the
// lowest id: ids only grow). The visible messages are the total less the
// hidden ones: approximate as Count is, since expired messages count until
// they are swept.
func depthSQL(schema string) string {
	return strings.NewReplacer("{s}", schema, "{now}", "coalesce($1::timestamptz, now())").Replace(`
SELECT
	(SELECT coalesce(sum(n), 0) FROM {s}.counts WHERE queue_id = $2),
	(SELECT count(*) FROM {s}.messages WHERE queue_id = $2 AND visible_at > {now} AND expires_at > {now}),
	(SELECT inserted_at FROM {s}.messages WHERE queue_id = $2 AND expires_at > {now} ORDER BY id LIMIT 1)`)
}

var _ driver.DepthReader = (*pgQueue)(nil)

// Depth reads the visible and hidden messages and the oldest one's
// insertion time (driver.DepthReader).
func (q *pgQueue) Depth(ctx context.Context) (driver.Depth, error) {
	if err := q.check(); err != nil {
		return driver.Depth{}, err
	}
	q.kickSweep()
	var total, hidden int64
	var oldest *time.Time
	if err := q.db.pool.QueryRow(ctx, depthSQL(quoteIdent(q.db.schema)), q.db.nowArg(), q.st.id).Scan(&total, &hidden, &oldest); err != nil {
		return driver.Depth{}, ended(ctx, err)
	}
	d := driver.Depth{Visible: int(max(total-hidden, 0)), InFlight: int(hidden)}
	if oldest != nil {
		d.Oldest = *oldest
	}
	return d, nil
}
