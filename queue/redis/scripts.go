package redis

import goredis "github.com/redis/go-redis/v9"

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
//	PREFIX{NAME}:seq     the id counter
//	PREFIX{NAME}:w       the wake-up marker: a sorted set of one member that BZPOPMIN blocks on
//	PREFIX{NAME}:m:ID    hash per message: b body, r receipt, d dequeue count, i inserted (µs), e expires (µs, 0 none)
//
// Every script takes the time as its last argument: the injected clock's
// microseconds, or "" for the server's own clock (TIME), so that workers
// whose clocks disagree still agree on visibility and expiry.

// common is prepended to every script.
const common = `
local function clock(a)
  if a ~= '' then return tonumber(a) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local z, x = KEYS[1], KEYS[2]
local base = string.sub(z, 1, -2)
local function mkey(id) return base .. 'm:' .. id end
-- sweep drops up to limit messages whose TTL has passed.
local function sweep(now, limit)
  local ids = redis.call('ZRANGEBYSCORE', x, '-inf', now, 'LIMIT', 0, limit)
  if #ids == 0 then return end
  for _, id in ipairs(ids) do redis.call('DEL', mkey(id)) end
  redis.call('ZREM', z, unpack(ids))
  redis.call('ZREM', x, unpack(ids))
end
-- drop removes one message.
local function drop(id)
  redis.call('DEL', mkey(id))
  redis.call('ZREM', z, id)
  redis.call('ZREM', x, id)
end
-- held finds a live message and checks its receipt: 1 held (and the key),
-- 0 gone or expired, -1 a stale receipt.
local function held(id, receipt, now)
  local h = mkey(id)
  local f = redis.call('HMGET', h, 'r', 'e')
  if not f[1] then return 0 end
  if f[2] ~= '0' and tonumber(f[2]) <= now then drop(id) return 0 end
  if receipt == '' or f[1] ~= receipt then return -1 end
  return 1, h
end
`

// putScript: KEYS z, x, seq, w; ARGV body, ttl µs (-1: none), delay µs,
// now. Returns {id, inserted µs}.
//
// Ids are sixteen decimal digits, so that the lexical order of the sorted
// set's ties is the order of the puts. The counter starts at the clock's
// microseconds the first time a queue is used: after a restart that lost
// the data, new ids are still above every id handed out before (unless
// the queue took more than a million puts a second on average), and a
// stale holder never deletes a new message that took an old id. Every
// sixteenth put sweeps a few expired messages, so that a queue nobody gets
// from (a poison queue) does not keep them forever.
var putScript = goredis.NewScript(common + `
local now = clock(ARGV[4])
local n = redis.call('INCR', KEYS[3])
if n == 1 then
  n = now
  redis.call('SET', KEYS[3], string.format('%d', n))
end
if n % 16 == 0 then sweep(now, 32) end
local id = string.format('%016d', n)
local ttl = tonumber(ARGV[2])
local e = 0
if ttl >= 0 then e = now + ttl end
redis.call('HSET', mkey(id), 'b', ARGV[1], 'r', '', 'd', 0, 'i', now, 'e', e)
local vis = now + tonumber(ARGV[3])
redis.call('ZADD', z, vis, id)
if e > 0 then redis.call('ZADD', x, e, id) end
redis.call('ZADD', KEYS[4], 'LT', vis, 'w')
return {id, now}
`)

// getScript: KEYS z, x, w; ARGV n, visibility µs, receipt nonce, now.
// Returns {until, id1, body1, dequeues1, inserted1, expires1, id2, …}; the
// receipt of the k-th message (from 1) is nonce .. k.
//
// When the batch was full and visible messages remain, it sets the wake-up
// marker again, so that another process blocked on it joins in (BullMQ's
// rule): one put wakes one process, and the backlog wakes the rest.
var getScript = goredis.NewScript(common + `
local now = clock(ARGV[4])
sweep(now, 100)
local n = tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, n)
local untl = now + tonumber(ARGV[2])
local out = {untl}
local hide, gone = {}, {}
local k = 0
for _, id in ipairs(ids) do
  local h = mkey(id)
  local f = redis.call('HMGET', h, 'b', 'd', 'i', 'e')
  if f[1] and (f[4] == '0' or tonumber(f[4]) > now) then
    k = k + 1
    local d = tonumber(f[2]) + 1
    redis.call('HSET', h, 'd', d, 'r', ARGV[3] .. k)
    hide[#hide + 1] = untl
    hide[#hide + 1] = id
    out[#out + 1] = id
    out[#out + 1] = f[1]
    out[#out + 1] = d
    out[#out + 1] = f[3]
    out[#out + 1] = f[4]
  else
    -- expired, or a stray id without its hash
    if f[1] then redis.call('DEL', h) end
    gone[#gone + 1] = id
  end
end
if #hide > 0 then redis.call('ZADD', z, unpack(hide)) end
if #gone > 0 then
  redis.call('ZREM', z, unpack(gone))
  redis.call('ZREM', x, unpack(gone))
end
if #ids == n and #redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 1) > 0 then
  redis.call('ZADD', KEYS[3], 'LT', now, 'w')
end
return out
`)

// deleteScript: KEYS z, x; ARGV id, receipt, now. Returns 1 deleted, 0
// not found, -1 stale receipt.
var deleteScript = goredis.NewScript(common + `
local now = clock(ARGV[3])
local ok = held(ARGV[1], ARGV[2], now)
if ok == 1 then drop(ARGV[1]) end
return ok
`)

// deleteBatchScript: KEYS z, x; ARGV now, id1, receipt1, id2, … Returns one
// code per receipt, as deleteScript's.
var deleteBatchScript = goredis.NewScript(common + `
local now = clock(ARGV[1])
local out, ids, keys = {}, {}, {}
local seen = {}
for j = 2, #ARGV, 2 do
  local id = ARGV[j]
  local ok
  if seen[id] then
    ok = 0 -- deleted earlier in this batch
  else
    ok = held(id, ARGV[j + 1], now)
    if ok == 1 then
      seen[id] = true
      ids[#ids + 1] = id
      keys[#keys + 1] = mkey(id)
    end
  end
  out[#out + 1] = ok
end
if #ids > 0 then
  redis.call('DEL', unpack(keys))
  redis.call('ZREM', z, unpack(ids))
  redis.call('ZREM', x, unpack(ids))
end
return out
`)

// updateScript: KEYS z, x, w; ARGV id, receipt, d µs, new receipt, now.
// Returns 1 updated (the new receipt is in force), 0, -1 as deleteScript.
// A release (d = 0) sets the wake-up marker: the message is visible again.
var updateScript = goredis.NewScript(common + `
local now = clock(ARGV[5])
local ok, h = held(ARGV[1], ARGV[2], now)
if ok ~= 1 then return ok end
redis.call('HSET', h, 'r', ARGV[4])
local vis = now + tonumber(ARGV[3])
redis.call('ZADD', z, vis, ARGV[1])
if vis == now then redis.call('ZADD', KEYS[3], 'LT', now, 'w') end
return 1
`)

// peekScript: KEYS z, x; ARGV n, now. Returns {id, body, dequeues,
// inserted, expires, visible-at, …} for up to n visible, unexpired
// messages, oldest first; changes nothing.
var peekScript = goredis.NewScript(common + `
local now = clock(ARGV[2])
local n = tonumber(ARGV[1])
local out = {}
local got, off = 0, 0
while got < n do
  local ids = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'WITHSCORES', 'LIMIT', off, n)
  if #ids == 0 then break end
  for j = 1, #ids, 2 do
    local f = redis.call('HMGET', mkey(ids[j]), 'b', 'd', 'i', 'e')
    if f[1] and (f[4] == '0' or tonumber(f[4]) > now) then
      out[#out + 1] = ids[j]
      out[#out + 1] = f[1]
      out[#out + 1] = f[2]
      out[#out + 1] = f[3]
      out[#out + 1] = f[4]
      out[#out + 1] = ids[j + 1]
      got = got + 1
      if got == n then break end
    end
  end
  off = off + n
end
return out
`)

// countScript: KEYS z, x; ARGV now. The messages, visible or not, less
// those whose TTL has passed and that no call has swept yet: ZCARD and one
// ZCOUNT, O(log n), exact.
var countScript = goredis.NewScript(common + `
local now = clock(ARGV[1])
return redis.call('ZCARD', z) - redis.call('ZCOUNT', x, '-inf', now)
`)

// clearScript: KEYS z, x, w; ARGV limit. Deletes up to limit messages and
// returns how many remain; the caller repeats until none do. The id
// counter stays, so ids are never reused.
var clearScript = goredis.NewScript(common + `
local ids = redis.call('ZRANGE', z, 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  for _, id in ipairs(ids) do redis.call('DEL', mkey(id)) end
  redis.call('ZREM', z, unpack(ids))
  redis.call('ZREM', x, unpack(ids))
end
local left = redis.call('ZCARD', z)
if left == 0 then redis.call('DEL', x, KEYS[3]) end
return left
`)
