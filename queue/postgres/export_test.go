package postgres

import "time"

// Listens reports how many times db's LISTEN connection has been
// established.
func Listens(db *DB) int { return db.hub.listens() }

// GetSQL is the statement a Get of db runs.
func GetSQL(db *DB) string { return db.sql.get }

// NowArg is the time db's statements compute from (nil: the server's).
func NowArg(db *DB) any { return db.nowArg() }

// SetClientSkew makes every reading of the client's clock the driver makes
// run d ahead (0: none).
func SetClientSkew(d time.Duration) { clientSkew.Store(int64(d)) }
