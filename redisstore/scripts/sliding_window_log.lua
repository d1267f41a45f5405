-- floodgate sliding-window log (https://github.com/floodgate-rl/floodgate)
--
-- Keeps the time of every admitted request for one window: never more than
-- `quota` requests in any interval of `window_us` microseconds. A request of
-- cost n occupies n consecutive microseconds starting at now, or just after
-- the newest entry if that is not earlier, so every entry of a key has a
-- distinct time even for many requests in the same microsecond.
--
-- KEYS[1]  the log: a ZSET whose members are the entries' times in
--          microseconds since the epoch, each member equal to its score
--          (unique, and stored as a compact integer in a listpack)
-- ARGV[1]  "allow" (record the request) or "refund" (drop the cost newest
--          entries, as if the request that added them had not been made)
-- ARGV[2]  quota: requests admitted per window (1 .. 2^20)
-- ARGV[3]  window_us: the window, in microseconds
-- ARGV[4]  cost (1 .. quota)
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
-- written with int() ('%d', or '%.0f'), never tostring (which keeps only 14
-- significant digits).

-- BEGIN common (identical in every floodgate script; a test keeps them in sync)
--
-- A decision's Redis CPU goes to the commands a script calls, to number
-- conversions (tonumber is strtod; string.format('%.0f') costs about as
-- much as a GET), and to Lua function calls and closures. So the scripts
-- call few commands, format with '%d' where it is exact, define no helper
-- functions, and check their arguments inline in one test: only a failing
-- call walks them again to name the bad one.
--
-- Division: for integers 0 <= a <= 2^53 and b >= 1, floor(a / b) and
-- ceil(a / b) are exact. a / b is rounded by less than 1/b, and a true
-- quotient that is not an integer is at least 1/b from the nearest one, so
-- rounding never crosses an integer. Hence also a % b = a - floor(a/b)*b.
local MAX = 9007199254740992 -- 2^53: integers up to it are exact in a double
local floor, ceil = math.floor, math.ceil

local op, cost = ARGV[1], 1
local quota, window = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[4] ~= '1' then -- comparing interned strings is one pointer test
  cost = tonumber(ARGV[4])
end
local now = ARGV[5]
if now == nil or now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
-- nil and NaN fail every comparison, so one test covers every argument.
if not ((op == 'allow' or op == 'refund') and quota and window and cost and now
    and quota >= 1 and quota <= MAX and quota % 1 == 0
    and window >= 1 and window <= MAX and window % 1 == 0
    and cost >= 1 and cost <= MAX and cost % 1 == 0
    and now >= 0 and now <= MAX and now % 1 == 0 and cost <= quota) then
  local function fail(msg)
    error({err = 'ERR floodgate: ' .. msg})
  end
  if op ~= 'allow' and op ~= 'refund' then
    fail('ARGV[1] must be "allow" or "refund", got "' .. tostring(op) .. '"')
  end
  local names = {'', 'quota', 'window_us', 'cost', 'now_us'}
  for i = 2, 5 do
    local v, lo = tonumber(ARGV[i]), 1
    if i == 5 then
      lo = 0 -- and absent or "" means TIME, which is always valid
      if ARGV[5] == nil or ARGV[5] == '' then
        v = 0
      end
    end
    if not (v and v >= lo and v <= MAX and v % 1 == 0) then
      fail('ARGV[' .. i .. '] (' .. names[i] .. ') must be an integer of at least ' .. lo .. ', got "' .. tostring(ARGV[i]) .. '"')
    end
  end
  fail('ARGV[4] (cost) ' .. ARGV[4] .. ' is more than the quota ' .. ARGV[2])
end
-- END common

-- int formats an integer exactly. '%d' is several times faster than
-- '%.0f', and exact wherever a C long holds the value: always within 2^31,
-- and up to 2^53 on 64-bit builds of Redis, which wide tests.
local wide = string.format('%d', MAX) == '9007199254740992'
local function int(x)
  if wide or (x < 2147483648 and x > -2147483648) then
    return string.format('%d', x)
  end
  return string.format('%.0f', x)
end

local key = KEYS[1]
if op == 'refund' then
  if redis.call('ZREMRANGEBYRANK', key, int(-cost), '-1') == 0 then
    return 0
  end
  local newest = redis.call('ZRANGE', key, '-1', '-1')[1]
  if newest then
    local reset = tonumber(newest) + window - now
    if reset > 0 then
      redis.call('PEXPIRE', key, int(ceil(reset / 1000)))
    else
      redis.call('DEL', key) -- only entries that left the window remain
    end
  end
  return 1
end

-- Entries at or before now - window have left the window: trim them, then
-- every entry left counts. (Trimming is idempotent housekeeping, so a
-- denied request may do it too; it changes no decision.)
redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - window))
local count = redis.call('ZCARD', key)
local newest
if count > 0 then
  newest = tonumber(redis.call('ZRANGE', key, '-1', '-1')[1])
end
if count + cost <= quota then
  local first = now
  if newest and newest >= now then
    first = newest + 1
  end
  if cost == 1 then
    local t = int(first)
    redis.call('ZADD', key, t, t)
  else
    -- ZADD in chunks: unpack() is limited to a few thousand values.
    local added = 0
    while added < cost do
      local chunk = math.min(cost - added, 256)
      local entries = {}
      for i = 0, chunk - 1 do
        local t = int(first + added + i)
        entries[2 * i + 1] = t
        entries[2 * i + 2] = t
      end
      redis.call('ZADD', key, unpack(entries))
      added = added + chunk
    end
  end
  local reset = first + cost - 1 + window - now
  redis.call('PEXPIRE', key, int(ceil(reset / 1000)))
  return {1, quota - count - cost, 0, reset}
end

-- Denied: the (count + cost - quota)-th oldest entry must leave the window
-- before the same cost fits.
local rank = int(count + cost - quota - 1)
local oldest = tonumber(redis.call('ZRANGE', key, rank, rank)[1])
return {0, math.max(0, quota - count), oldest + window - now, newest + window - now}
