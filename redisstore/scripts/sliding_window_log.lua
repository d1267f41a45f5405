-- floodgate sliding-window log (https://github.com/floodgate-rl/floodgate)
--
-- Keeps the time of every admitted request for one window: never more than
-- `quota` requests in any interval of `window_us` microseconds. A request of
-- cost n occupies n consecutive microseconds starting at now, or just after
-- the newest entry if that is not earlier, so every entry of a key has a
-- distinct time even for many requests in the same microsecond. (After a
-- clock that ran back, as in a failover to a server whose clock is behind,
-- a request of cost 1 takes now if no entry holds it: the expiry it sets,
-- a whole window, is still no shorter than what the log had left.)
--
-- KEYS[1]  the log: a ZSET whose members are the entries' times in
--          microseconds since the epoch, each member equal to its score
--          (unique, and stored as a compact integer in a listpack)
-- ARGV[1]  "allow" (record the request) or "refund" (drop the cost newest
--          entries, as if the request that added them had not been made)
-- ARGV[2]  quota: requests admitted per window (1 .. 2^20)
-- ARGV[3]  window_us: the window, in microseconds
-- ARGV[4]  cost (0 .. quota; 0 reads the key and writes nothing)
-- ARGV[5]  now, in microseconds since the Unix epoch; absent or "" means
--          the server's clock (redis.call('TIME'))
--
-- Reply to "allow": an array of four integers
--   {allowed (1 or 0), remaining, retry_after_us, reset_after_us}
-- where retry_after_us is 0 when allowed, and otherwise the time until
-- enough of the oldest entries leave the window for the same cost to fit;
-- reset_after_us is the time until the newest entry leaves the window.
-- Every call first trims the entries that have left the window (which
-- changes no decision), so the rest can be counted with ZCARD. A denied
-- request writes nothing else. An admitted one adds its entries and sets
-- PEXPIRE to ceil(reset_after_us / 1000) ms, so an idle log vanishes with its
-- newest entry.
-- Reply to "refund": 1 if entries were dropped, 0 if the log was empty.
--
-- Every number is an integer below 2^53 (exact in Lua's doubles); times are
-- written with format(int, x) ('%d', or '%.0f'), never tostring (which
-- keeps only 14 significant digits).

-- int is the format of an exact integer: '%d' is several times faster
-- than '%.0f', and exact up to 2^53 wherever a C long holds 64 bits, as on
-- every 64-bit build of Redis.
local format = string.format
local int = format('%d', MAX) == '9007199254740992' and '%d' or '%.0f'

local key = KEYS[1]
if op == 'refund' then
  if redis.call('ZREMRANGEBYRANK', key, format(int, -cost), '-1') == 0 then
    return 0
  end
  local newest = redis.call('ZRANGE', key, '-1', '-1')[1]
  if newest then
    local reset = tonumber(newest) + window - now
    if reset > 0 then
      redis.call('PEXPIRE', key, format(int, ceil(reset / 1000)))
    else
      redis.call('DEL', key) -- only entries that left the window remain
    end
  end
  return 1
end

-- Entries at or before now - window have left the window: trim them, then
-- every entry left counts. (Trimming is idempotent housekeeping, so a
-- denied request may do it too; it changes no decision.)
if cost == 0 then -- a check that takes nothing: count the live entries, write nothing
  local live = redis.call('ZCOUNT', key, '(' .. format(int, now - window), '+inf')
  local reset = 0
  if live > 0 then
    reset = tonumber(redis.call('ZRANGE', key, '-1', '-1')[1]) + window - now
  end
  return {1, math.max(0, quota - live), 0, reset}
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', format(int, now - window))
local count = redis.call('ZCARD', key)
if count + cost <= quota then
  local first = now
  if cost == 1 then
    -- With a clock that never runs back, an entry at now exists exactly
    -- when the newest is not earlier (runs of entries are consecutive from
    -- the now they started at): ZADD NX both tests and adds, and only a
    -- clash reads the newest.
    local t = format(int, now)
    if redis.call('ZADD', key, 'NX', t, t) == 0 then
      first = tonumber(redis.call('ZRANGE', key, '-1', '-1')[1]) + 1
      t = format(int, first)
      redis.call('ZADD', key, t, t)
    end
  else
    if count > 0 then
      local newest = tonumber(redis.call('ZRANGE', key, '-1', '-1')[1])
      if newest >= now then
        first = newest + 1
      end
    end
    -- ZADD in chunks: unpack() is limited to a few thousand values.
    local added = 0
    while added < cost do
      local chunk = math.min(cost - added, 256)
      local entries = {}
      for i = 0, chunk - 1 do
        local t = format(int, first + added + i)
        entries[2 * i + 1] = t
        entries[2 * i + 2] = t
      end
      redis.call('ZADD', key, unpack(entries))
      added = added + chunk
    end
  end
  local reset = first + cost - 1 + window - now
  redis.call('PEXPIRE', key, format(int, ceil(reset / 1000)))
  return {1, quota - count - cost, 0, reset}
end

local newest = tonumber(redis.call('ZRANGE', key, '-1', '-1')[1])

-- Denied: the (count + cost - quota)-th oldest entry must leave the window
-- before the same cost fits.
local rank = format(int, count + cost - quota - 1)
local oldest = tonumber(redis.call('ZRANGE', key, rank, rank)[1])
return {0, math.max(0, quota - count), oldest + window - now, newest + window - now}
