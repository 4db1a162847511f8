package driver

// Identifier is the capability of a driver whose queue handles can say
// which backend queue they are: Identity returns a comparable value, equal
// for two handles on one queue of one backend and different otherwise.
// Two backends may each hold a queue of the same name (two SQLite files,
// two PostgreSQL databases): a name alone does not tell them apart. A
// driver may return different identities for one queue reached two ways
// (two URLs that spell one file differently); it must never return equal
// identities for two queues. queue.Queue.SameQueue asks it.
type Identifier interface {
	Identity() any
}
