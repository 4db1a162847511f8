package redis

import (
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The scripts. Each operation of the driver is one of them: one EVALSHA,
// one round trip, atomic on the server. go-redis's Script.Run sends EVALSHA
// and falls back to EVAL (which loads the script) only when the server
// answers NOSCRIPT, after a restart or a SCRIPT FLUSH.
//
// Keys of one queue, all sharing the hash tag {NAME} so that they land in
// one slot of a cluster (the message hashes are named inside the scripts,
// within the same tag):
//
//	PREFIX{NAME}:z       sorted set: message id scored by visible-at (µs)
//	PREFIX{NAME}:x       sorted set: message id scored by expires-at (µs), for messages with a TTL
//	PREFIX{NAME}:w       the wake-up marker: a sorted set of one member that BZPOPMIN blocks on
//	PREFIX{NAME}:m:ID    hash per message: b body, r receipt, d dequeue count, i inserted (µs), e expires (µs, 0 none)
//	PREFIX{NAME}:t:T     set of the ids whose time part starts with T (8 characters, about a second) that were deleted soon after their put: tombstones, which Redis expires
//
// Message ids are chosen by the client (id.go); no counter is kept.
//
// Every script takes the time as its last argument: the injected clock's
// microseconds, or "" for the server's own clock (TIME), so that workers
// whose clocks disagree still agree on visibility and expiry.
//
// On the server's clock, Redis expires what a TTL ends by itself, with no
// call on the queue: a message's hash expires at the message's expiry
// (PEXPIREAT, to the millisecond, never before the scripts count it
// expired); the two sorted sets expire together with their last message,
// at most indexSlack later, and never while the queue holds a message
// without TTL; the marker a little after its message becomes visible
// (markerLife). A message that Redis expired leaves its id in z and x until
// a get, peek or put sweeps it, or the sets expire; Count and Depth never
// count it (they subtract x's expired range). With an injected clock Redis
// cannot know the time the scripts read, so nothing gets a Redis expiry and
// the sweeps alone reclaim.

const (
	// sweepChunk is the most expired messages one script drops: a thousand
	// keys and sorted-set entries are well under a millisecond of the
	// server's time, so that no call holds the server for long however large
	// the expired backlog (issue 25: one Peek over 30,000 expired messages
	// held it for 6–12 s). Get and Peek call again until the backlog is
	// gone.
	sweepChunk = 1000

	// putSweepEvery and putSweep: every putSweepEvery-th put of a client
	// drops up to putSweep expired messages, so that a queue nobody gets
	// from (a poison queue) does not keep their ids while puts keep its
	// sorted sets alive.
	putSweepEvery = 16
	putSweep      = 32

	// indexSlack bounds how long z and x outlive the last message's TTL: a
	// put moves their expiry only when its message would outlive them, and
	// then to its expiry plus an eighth of its TTL, at most this. A steady
	// stream of puts then moves it once a minute (with the default 7-day
	// TTL), not at every put.
	indexSlack = time.Minute

	// markerLife is how long a wake-up marker that no process popped stays
	// after its message became visible. Every blocked subscriber pops it at
	// once, a subscriber's loop blocks again within milliseconds of a wake,
	// and one that reconnects (after at most 10 s) signals its subscribers
	// anyway: an older marker has nobody left to wake.
	markerLife = time.Minute
)

// The Lua helpers. A script starts with those it calls (helpers called by
// a helper come before it): Lua makes a closure of every local function
// each time a script runs, which costs a put as much as a command, so no
// script carries helpers it does not call.
const (
	// luaKeys names the queue's sorted sets and message hashes: mb is
	// the message hashes' prefix, built once per script so that a loop
	// over messages makes one string per key (mb .. id), and call is
	// redis.call without its two table lookups.
	luaKeys = `
local z, x = KEYS[1], KEYS[2]
local base = string.sub(z, 1, -2)
local mb = base .. 'm:'
local call = redis.call
local function mkey(id) return mb .. id end
`
	// luaClock reads the script's time: the injected clock's, or TIME.
	luaClock = `
local function clock(a)
  if a ~= '' then return tonumber(a) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`
	// luaAfter compares the times the hashes keep (decimal strings of
	// µs: i, e) with a time of the script without turning each into a
	// number: after(a, s, n) is a > n, where s is digits(n) (nil for a
	// negative n). Decimal strings of integers ≥ 0 without leading zeros
	// (how Redis writes a Lua number) order by length, then as text, so
	// that a loop over messages calls no strtod (tonumber). Other strings
	// take tonumber (an empty one, never written, counts as no later): a
	// negative time, only ever an injected clock's, and the exponent form
	// Redis 7.2.0–7.2.4 write a Lua number with eight or more trailing
	// zeros in ("1.7672256e+15", redis/redis#13113; hashes keep it after
	// an upgrade), told by its second character, never a digit. Per
	// call (callgrind, Redis 7.0): tonumber 2,090 instructions, this
	// 1,310, without the exponent form's check 1,100.
	luaAfter = `
local byte = string.byte
local function digits(n)
  if n < 0 then return nil end
  return string.format('%d', n)
end
local function after(a, s, n)
  local c, d = byte(a, 1, 2)
  if s == nil or c == 45 or not d or d < 48 or d > 57 then
    local t = tonumber(a)
    return t ~= nil and t > n
  end
  local la, ls = #a, #s
  if la ~= ls then return la > ls end
  return a > s
end
`
	// luaMs: the millisecond that Redis's expiry of something that ends
	// at us µs takes: Redis deletes a key once its clock is past that
	// millisecond, so never before us.
	luaMs = `
local function ms(us) return math.floor(us / 1000) end
-- int(n) is n as integer text: Redis 7.2.0–7.2.4 pass a Lua number with
-- 8 or more trailing zeros as exponent text (redis/redis#13113), which
-- PEXPIRE and PEXPIREAT refuse after the script's writes have run.
local function int(n) return string.format('%d', n) end
`
	// luaSweep drops up to limit messages whose TTL has passed, the
	// earliest expiry first, and returns how many it dropped.
	luaSweep = `
local function sweep(now, limit)
  if limit <= 0 then return 0 end
  local ids = redis.call('ZRANGEBYSCORE', x, '-inf', now, 'LIMIT', 0, limit)
  local k = #ids
  if k == 0 then return 0 end
  local keys = {}
  for i = 1, k do keys[i] = mkey(ids[i]) end
  redis.call('DEL', unpack(keys))
  redis.call('ZREM', z, unpack(ids))
  redis.call('ZREMRANGEBYRANK', x, 0, k - 1)
  return k
end
`
	// luaHeld finds a live message and checks its receipt: 1 held (and
	// the key and the message's inserted time), 2 held under again
	// already (an update whose reply was lost, sent again), 0 gone or
	// expired (then dropped), -1 a stale receipt.
	// (after luaAfter; ns is digits(now)).
	luaHeld = `
local function held(id, receipt, now, ns, again)
  local h = mb .. id
  local f = call('HMGET', h, 'r', 'e', 'i')
  if not f[1] then return 0 end
  if f[2] ~= '0' and not after(f[2], ns, now) then
    call('DEL', h)
    call('ZREM', z, id)
    call('ZREM', x, id)
    return 0
  end
  if again and f[1] == again then return 2, h end
  if receipt == '' or f[1] ~= receipt then return -1 end
  return 1, h, f[3]
end
`
	// luaTombs, when messages are deleted (a list of {id, inserted µs}),
	// keeps the id of each inserted less than tombstoneLife ago (on the
	// server's clock; with an injected clock, whose time Redis cannot
	// read, every one) in a tombstone set: one per queue and second of
	// the ids' time part (their first 8 characters), which Redis expires
	// tombstoneLife after its latest id came, so that one SADD and one
	// PEXPIRE serve a whole batch. The put script stores nothing under an
	// id it holds. Ids of other shapes (earlier versions' counters) are
	// never put again and get none.
	//
	// (After luaAfter.) graves(now, real) starts the list of one script,
	// keep adds a deleted message (its id and inserted time, the hash's i
	// string) and bury writes the sets. keep compares the inserted time
	// as text with the list's cutoff (no tonumber) and groups the ids by
	// their time part, which consecutive ids mostly share.
	luaTombs = `
local function graves(now, real)
  local cut = now - TOMBSTONE_LIFE * 1000
  return {real = real, cut = cut, cs = digits(cut), sets = {}, order = {}}
end
local function keep(g, id, ins)
  if #id ~= 26 or (g.real and not (ins and after(ins, g.cs, g.cut))) then return end
  local t = string.sub(id, 1, 8)
  local s = g.sets[t]
  if not s then
    s = {}
    g.sets[t] = s
    g.order[#g.order + 1] = t
  end
  s[#s + 1] = id
end
local function bury(g)
  for _, t in ipairs(g.order) do
    local k = base .. 't:' .. t
    call('SADD', k, unpack(g.sets[t]))
    call('PEXPIRE', k, TOMBSTONE_LIFE)
  end
end
`
	// luaMark (after luaMs) sets the wake-up marker w to vis, unless it
	// holds an earlier time; on the server's clock, a marker it creates
	// expires markerLife after vis (one that exists keeps its expiry: its
	// time is the earlier).
	luaMark = `
local function mark(w, vis, now, real)
  if redis.call('ZADD', w, 'LT', vis, 'w') == 1 and real then
    redis.call('PEXPIRE', w, int(ms(vis - now) + MARKER_LIFE))
  end
end
`
	// luaOutlive (after luaMs; server's clock), after a put of a message
	// that expires at e: z and x expire together, no sooner than their
	// last member and at most indexSlack after it, and never while z holds
	// a message without TTL (then both persist: x's expired members must
	// stay for Count to subtract them from z until a sweep).
	luaOutlive = `
local function outlive(now, e, ttl)
  local want = ms(e) + 1
  local tx = redis.call('PTTL', x)
  if tx >= 0 and ms(now) + tx >= want then return end
  if redis.call('ZCARD', z) ~= redis.call('ZCARD', x) then return end
  local at = want + math.min(math.floor(ttl / 8000), INDEX_SLACK)
  if tx == -1 then
    -- new sets, or sets written before expiries were kept: outlive every member
    local last = redis.call('ZRANGE', x, -1, -1, 'WITHSCORES')
    at = math.max(at, ms(tonumber(last[2])) + 1)
  end
  redis.call('PEXPIREAT', x, int(at))
  redis.call('PEXPIREAT', z, int(at))
end
`
	// luaSettle (after luaMs; server's clock), after messages left: once
	// z holds no message without TTL, z and x expire with the last of x's
	// members.
	luaSettle = `
local function settle()
  if redis.call('PTTL', z) ~= -1 then return end
  if redis.call('ZCARD', z) ~= redis.call('ZCARD', x) then return end
  local last = redis.call('ZRANGE', x, -1, -1, 'WITHSCORES')
  local at = ms(tonumber(last[2])) + 1
  redis.call('PEXPIREAT', x, int(at))
  redis.call('PEXPIREAT', z, int(at))
end
`
)

// luaConstants fills in the Go constants the helpers name.
var luaConstants = strings.NewReplacer(
	"INDEX_SLACK", strconv.FormatInt(indexSlack.Milliseconds(), 10),
	"MARKER_LIFE", strconv.FormatInt(markerLife.Milliseconds(), 10),
	"TOMBSTONE_LIFE", strconv.FormatInt(tombstoneLife.Milliseconds(), 10),
	"RECEIPT_DIGITS", "'"+receiptDigits+"'",
)

// receiptDigits: the k-th message of a get (from 1) has the receipt
// nonce + receiptDigits[k-1], one character, so that the script builds
// its receipts with no number turned into text. The first nine are the
// digits earlier versions wrote.
const receiptDigits = "123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_"

// script is a script of helpers and a body.
func script(body string, helpers ...string) *goredis.Script {
	return goredis.NewScript(luaConstants.Replace(strings.Join(helpers, "") + body))
}

// luaFound (after luaKeys): what an earlier send of a put under id left:
// the message's inserted time, 0 for its tombstone (a delete came first),
// or nil if none did.
const luaFound = `
local function found(id)
  local ins = redis.call('HGET', mkey(id), 'i')
  if ins then return tonumber(ins) end
  if redis.call('SISMEMBER', base .. 't:' .. string.sub(id, 1, 8), id) == 1 then return 0 end
  return nil
end
`

// luaStore (after luaKeys, luaMs, luaOutlive) writes a new message: its
// hash, its place in z (and x, with a TTL), and on the server's clock its
// expiry. meta is the message's metadata (driver.EncodeMetadata's JSON),
// "" for none: the hash then has no m field. It returns the time it
// becomes visible. Put and PutBatch store through it, so a message is
// written one way.
const luaStore = `
local function store(id, body, ttl, delay, meta, now, real)
  local h = mkey(id)
  local e = 0
  if ttl >= 0 then e = now + ttl end
  if meta == '' then
    redis.call('HSET', h, 'b', body, 'r', '', 'd', 0, 'i', now, 'e', e)
  else
    redis.call('HSET', h, 'b', body, 'r', '', 'd', 0, 'i', now, 'e', e, 'm', meta)
  end
  local vis = now + delay
  redis.call('ZADD', z, vis, id)
  if e > 0 then redis.call('ZADD', x, e, id) end
  if real then
    if e > 0 then
      redis.call('PEXPIREAT', h, ms(e))
      outlive(now, e, ttl)
    else
      redis.call('PERSIST', z)
      redis.call('PERSIST', x)
    end
  end
  return vis
end
`

// putScript: KEYS z, x, w; ARGV id, body, ttl µs (-1: none), delay µs,
// metadata ("" for none: the hash then has no m field), sweep limit, now.
// Returns {id, inserted µs}.
//
// The id is the client's. A message with that id, or its tombstone, means
// another send of the same put came first (the put sent again after its
// reply was lost, or a first send that was late in the network): the
// script writes nothing and answers as the first time (inserted 0 for a
// tombstone), so a put is stored once however many times it is sent, and a
// late send neither resets a message a consumer holds nor brings back one
// it deleted.
var putScript = script(`
local now = clock(ARGV[7])
local real = ARGV[7] == ''
local id = ARGV[1]
local ins = found(id)
if ins then return {id, ins} end
sweep(now, tonumber(ARGV[6]))
local vis = store(id, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], now, real)
mark(KEYS[3], vis, now, real)
return {id, now}
`, luaKeys, luaClock, luaMs, luaSweep, luaMark, luaOutlive, luaFound, luaStore)

// putBatchScript: KEYS z, x, w; ARGV sweep limit, now, then id, body, ttl
// µs, delay µs, metadata for each message. Returns {id1, inserted1, id2, …}.
//
// Each message is putScript's: written only if no earlier send of it left
// the message or its tombstone (then answered as the first time), so a
// batch sent again after its reply was lost stores each message once, and
// neither resets one a consumer holds nor brings back one it deleted. The
// wake-up marker is set once, to the earliest of the new messages' times.
var putBatchScript = script(`
local now = clock(ARGV[2])
local real = ARGV[2] == ''
local out, new = {}, {}
for j = 3, #ARGV, 5 do
  local ins = found(ARGV[j])
  out[#out + 1] = ARGV[j]
  if ins then
    out[#out + 1] = ins
  else
    out[#out + 1] = now
    new[#new + 1] = j
  end
end
if #new > 0 then
  sweep(now, tonumber(ARGV[1]))
  local first
  for _, j in ipairs(new) do
    local vis = store(ARGV[j], ARGV[j + 1], tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), ARGV[j + 4], now, real)
    if not first or vis < first then first = vis end
  end
  mark(KEYS[3], first, now, real)
end
return out
`, luaKeys, luaClock, luaMs, luaSweep, luaMark, luaOutlive, luaFound, luaStore)

// getScript: KEYS z, x, w; ARGV n (at most len(receiptDigits)),
// visibility µs, receipt nonce, sweep limit, now. Returns {until, more,
// id1, body1, dequeues1, inserted1, expires1, metadata1 (nil for none),
// id2, …}; the receipt of the k-th message (from 1) is nonce ..
// receiptDigits[k-1].
//
// Per message it makes one HMGET and one HSET and turns no number into
// text but the dequeue count (string.format's %d, not Redis's %.17g):
// the visible-until score is made text once, the receipt's suffix is a
// character of receiptDigits (no number), and the expiry is compared as
// text (luaAfter).
// more is 1 when the batch is short and the sweep stopped at its limit:
// expired messages may still hide live ones, and the caller calls again.
//
// When the batch was full and visible messages remain, it sets the wake-up
// marker again, so that another process blocked on it joins in (BullMQ's
// rule): one put wakes one process, and the backlog wakes the rest.
var getScript = script(`
local now = clock(ARGV[5])
local limit = tonumber(ARGV[4])
local swept = sweep(now, limit)
local n = tonumber(ARGV[1])
local ids = call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, n)
local untl = now + tonumber(ARGV[2])
local us = string.format('%d', untl)
local ns = digits(now)
local rn = ARGV[3]
local out = {untl, 0}
local hide, gone = {}, {}
local k, o, v, g = 0, 2, 0, 0
for i = 1, #ids do
  local id = ids[i]
  local h = mb .. id
  local f = call('HMGET', h, 'b', 'd', 'i', 'e', 'm')
  local e = f[4]
  if f[1] and (e == '0' or after(e, ns, now)) then
    k = k + 1
    local d = string.format('%d', f[2] + 1)
    call('HSET', h, 'd', d, 'r', rn .. string.sub(RECEIPT_DIGITS, k, k))
    hide[v + 1] = us
    hide[v + 2] = id
    v = v + 2
    out[o + 1] = id
    out[o + 2] = f[1]
    out[o + 3] = d
    out[o + 4] = f[3]
    out[o + 5] = e
    out[o + 6] = f[5]
    o = o + 6
  else
    -- expired, or a stray id without its hash
    if f[1] then call('DEL', h) end
    g = g + 1
    gone[g] = id
  end
end
if v > 0 then call('ZADD', z, unpack(hide)) end
if g > 0 then
  call('ZREM', z, unpack(gone))
  call('ZREM', x, unpack(gone))
end
if k < n and swept == limit then out[2] = 1 end
if #ids == n and #call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 1) > 0 then
  mark(KEYS[3], now, now, ARGV[5] == '')
end
return out
`, luaKeys, luaClock, luaMs, luaAfter, luaSweep, luaMark)

// deleteScript: KEYS z, x; ARGV id, receipt, now. Returns 1 deleted, 0
// not found, -1 stale receipt. A deleted message leaves its tombstone.
var deleteScript = script(`
local now = clock(ARGV[3])
local real = ARGV[3] == ''
local ok, h, ins = held(ARGV[1], ARGV[2], now, digits(now))
if ok == 1 then
  call('DEL', h)
  local g = graves(now, real)
  keep(g, ARGV[1], ins)
  bury(g)
  call('ZREM', z, ARGV[1])
  call('ZREM', x, ARGV[1])
  if real then settle() end
end
return ok
`, luaKeys, luaClock, luaAfter, luaHeld, luaTombs, luaMs, luaSettle)

// deleteBatchScript: KEYS z, x; ARGV now, id1, receipt1, id2, … Returns one
// code per receipt, as deleteScript's, and leaves the same tombstones.
// Per message: one HMGET (held), and no number made from text.
var deleteBatchScript = script(`
local now = clock(ARGV[1])
local real = ARGV[1] == ''
local ns = digits(now)
local g = graves(now, real)
local out, ids, keys = {}, {}, {}
local seen = {}
local m = 0
for j = 2, #ARGV, 2 do
  local id = ARGV[j]
  local ok = 0
  if not seen[id] then -- else deleted earlier in this batch
    local h, ins
    ok, h, ins = held(id, ARGV[j + 1], now, ns)
    if ok == 1 then
      keep(g, id, ins)
      seen[id] = true
      m = m + 1
      ids[m] = id
      keys[m] = h
    end
  end
  out[j / 2] = ok
end
if m > 0 then
  call('DEL', unpack(keys))
  bury(g)
  call('ZREM', z, unpack(ids))
  call('ZREM', x, unpack(ids))
  if real then settle() end
end
return out
`, luaKeys, luaClock, luaAfter, luaHeld, luaTombs, luaMs, luaSettle)

// updateScript: KEYS z, x, w; ARGV id, receipt, d µs, new receipt, now.
// Returns 1 updated (the new receipt is in force), 0, -1 as deleteScript.
// The new receipt is the client's: a message that holds it already was
// updated by this same call, whose reply was lost, and the script answers 1
// again without moving it. A release (d = 0) sets the wake-up marker: the
// message is visible again.
var updateScript = script(`
local now = clock(ARGV[5])
local ok, h = held(ARGV[1], ARGV[2], now, digits(now), ARGV[4])
if ok == 2 then return 1 end
if ok ~= 1 then return ok end
redis.call('HSET', h, 'r', ARGV[4])
local vis = now + tonumber(ARGV[3])
redis.call('ZADD', z, vis, ARGV[1])
if vis == now then mark(KEYS[3], now, now, ARGV[5] == '') end
return 1
`, luaKeys, luaClock, luaAfter, luaHeld, luaMs, luaMark)

// peekScript: KEYS z, x; ARGV n, sweep limit, now. Returns {more, id,
// body, dequeues, inserted, expires, visible-at, metadata (nil for none), …} for up to n visible,
// unexpired messages, oldest first. It first drops expired messages, up to
// the limit: if it reached it, more may remain, and it returns {1} alone
// for the caller to call again; else {0, …}. It changes nothing else.
var peekScript = script(`
local now = clock(ARGV[3])
local limit = tonumber(ARGV[2])
if sweep(now, limit) == limit then return {1} end
local n = tonumber(ARGV[1])
local out = {0}
local ids = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'WITHSCORES', 'LIMIT', 0, n)
for j = 1, #ids, 2 do
  local f = redis.call('HMGET', mkey(ids[j]), 'b', 'd', 'i', 'e', 'm')
  if f[1] and (f[4] == '0' or tonumber(f[4]) > now) then
    out[#out + 1] = ids[j]
    out[#out + 1] = f[1]
    out[#out + 1] = f[2]
    out[#out + 1] = f[3]
    out[#out + 1] = f[4]
    out[#out + 1] = ids[j + 1]
    out[#out + 1] = f[5]
  end
end
return out
`, luaKeys, luaClock, luaSweep)

// countScript: KEYS z, x; ARGV now. The messages, visible or not, less
// those whose TTL has passed and that no call has swept yet: ZCARD and one
// ZCOUNT, O(log n), exact.
var countScript = script(`
local now = clock(ARGV[1])
return redis.call('ZCARD', z) - redis.call('ZCOUNT', x, '-inf', now)
`, luaKeys, luaClock)

// clearScript: KEYS z, x, w; ARGV limit, now. Deletes up to limit
// messages and returns how many remain; the caller repeats until none do.
// Each deleted message leaves its tombstone, as a delete's does, so that a
// send of its put that arrives after the Clear (sent again, or late in the
// network) does not bring it back. With the last message it deletes the
// marker, and PREFIX{NAME}:seq, the id counter that earlier versions kept.
var clearScript = script(`
local now = clock(ARGV[2])
local ids = redis.call('ZRANGE', z, 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  local keys = {}
  local g = graves(now, ARGV[2] == '')
  for i, id in ipairs(ids) do
    keys[i] = mkey(id)
    local ins = redis.call('HGET', keys[i], 'i')
    if ins then keep(g, id, ins) end
  end
  redis.call('DEL', unpack(keys))
  bury(g)
  redis.call('ZREM', z, unpack(ids))
  redis.call('ZREM', x, unpack(ids))
end
local left = redis.call('ZCARD', z)
if left == 0 then redis.call('DEL', x, KEYS[3], base .. 'seq') end
return left
`, luaKeys, luaClock, luaAfter, luaTombs)
