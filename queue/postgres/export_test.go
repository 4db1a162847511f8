package postgres

// Listens reports how many times db's LISTEN connection has been
// established.
func Listens(db *DB) int { return db.hub.listens() }
