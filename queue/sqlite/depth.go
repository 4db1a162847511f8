package sqlite

import (
	"context"
	"database/sql"

	"github.com/adaptq/adaptq/queue/driver"
)

// sqlDepthRead reads a queue's depth in one statement, so in one snapshot:
// the total as Count reads it (O(1)), the messages hidden now (a range of
// messages_held, as many as consumers hold, and one of messages_ready, those
// put with a delay),
// and the insertion time of the oldest unexpired message, found by a walk
// of the table in id order (ids only grow, so the first row of the queue
// is its oldest) that stops at the first one.
const sqlDepthRead = `SELECT
	(SELECT depth - (SELECT count(*) FROM messages INDEXED BY messages_expiry
	                 WHERE queue_id = ?1 AND expires_at <= ?2)
	 FROM queues WHERE id = ?1),
	(SELECT count(*) FROM messages INDEXED BY messages_ready
	 WHERE queue_id = ?1 AND receipt IS NULL AND visible_at > ?2 AND expires_at > ?2) +
	(SELECT count(*) FROM messages INDEXED BY messages_held
	 WHERE queue_id = ?1 AND receipt IS NOT NULL AND visible_at > ?2 AND expires_at > ?2),
	(SELECT inserted_at FROM messages NOT INDEXED
	 WHERE queue_id = ?1 AND expires_at > ?2 ORDER BY id LIMIT 1)`

var _ driver.DepthReader = (*driverQueue)(nil)

// Depth reads the visible and hidden messages and the oldest one's age
// (driver.DepthReader) on a read-only connection.
func (q *driverQueue) Depth(ctx context.Context) (driver.Depth, error) {
	var total, hidden int
	var oldest sql.NullInt64
	if err := q.db.r.QueryRowContext(ctx, sqlDepthRead, q.qid, q.now()).Scan(&total, &hidden, &oldest); err != nil {
		return driver.Depth{}, q.fail(err)
	}
	d := driver.Depth{Visible: max(total-hidden, 0), InFlight: hidden}
	if oldest.Valid {
		d.Oldest = fromNanos(oldest.Int64)
	}
	return d, nil
}
