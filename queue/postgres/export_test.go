package postgres

// Listens reports how many times db's LISTEN connection has been
// established.
func Listens(db *DB) int { return db.hub.listens() }

// GetSQL is the statement a Get of db runs.
func GetSQL(db *DB) string { return db.sql.get }

// NowArg is the time db's statements compute from (nil: the server's).
func NowArg(db *DB) any { return db.nowArg() }
