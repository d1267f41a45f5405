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
-- reset_after_us is the time until the newest entry leaves the window. A
-- denied request writes nothing. An admitted one trims the entries that left
-- the window, adds its own and sets PEXPIRE to ceil(reset_after_us / 1000)
-- ms, so an idle log vanishes with its newest entry.
-- Reply to "refund": 1 if entries were dropped, 0 if the log was empty.
--
-- Every number is an integer below 2^53 (exact in Lua's doubles); times are
-- written with string.format('%.0f'), never tostring (which keeps only 14
-- significant digits).

-- BEGIN common (identical in every floodgate script; a test keeps them in sync)
local fmod = math.fmod

local function fail(msg)
  error({err = 'ERR floodgate: ' .. msg})
end

-- arg returns ARGV[i] as an integer in [lo, 2^53], or fails naming it.
local function arg(i, name, lo)
  local v = tonumber(ARGV[i])
  if not v or v < lo or v > 9007199254740992 or v % 1 ~= 0 then -- NaN fails v % 1
    fail('ARGV[' .. i .. '] (' .. name .. ') must be an integer of at least ' .. lo .. ', got "' .. tostring(ARGV[i]) .. '"')
  end
  return v
end

-- clock returns ARGV[i] if given, else the server's time, in microseconds.
local function clock(i)
  if ARGV[i] ~= nil and ARGV[i] ~= '' then
    return arg(i, 'now_us', 0)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- str formats an integer exactly (tostring would print 1.893456e+15).
local function str(x)
  return string.format('%.0f', x)
end

-- floordiv and ceildiv divide integers a >= 0, b > 0 exactly: fmod is exact
-- and a - r is a multiple of b, so no rounding can creep in.
local function floordiv(a, b)
  return (a - fmod(a, b)) / b
end

local function ceildiv(a, b)
  local r = fmod(a, b)
  local q = (a - r) / b
  if r > 0 then
    q = q + 1
  end
  return q
end

-- expire keeps key until reset_us microseconds from now (at least 1 ms).
local function expire(key, reset_us)
  redis.call('PEXPIRE', key, str(math.max(1, ceildiv(reset_us, 1000))))
end

local op = ARGV[1]
if op ~= 'allow' and op ~= 'refund' then
  fail('ARGV[1] must be "allow" or "refund", got "' .. tostring(op) .. '"')
end
local quota = arg(2, 'quota', 1)
local window = arg(3, 'window_us', 1)
local cost = arg(4, 'cost', 1)
if cost > quota then
  fail('ARGV[4] (cost) ' .. str(cost) .. ' is more than the quota ' .. str(quota))
end
local now = clock(5)
-- END common

local key = KEYS[1]
if op == 'refund' then
  if redis.call('ZREMRANGEBYRANK', key, str(-cost), '-1') == 0 then
    return 0
  end
  local newest = redis.call('ZRANGE', key, '-1', '-1')[1]
  if newest then
    local reset = tonumber(newest) + window - now
    if reset > 0 then
      expire(key, reset)
    else
      redis.call('DEL', key) -- only entries that left the window remain
    end
  end
  return 1
end

-- Entries at or before now - window have left the window.
local gone = str(now - window)
local count = redis.call('ZCOUNT', key, '(' .. gone, '+inf')
if count + cost <= quota then
  local first = now
  if count > 0 then
    first = math.max(now, tonumber(redis.call('ZRANGE', key, '-1', '-1')[1]) + 1)
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', gone)
  -- ZADD in chunks: unpack() is limited to a few thousand values.
  local added = 0
  while added < cost do
    local chunk = math.min(cost - added, 256)
    local entries = {}
    for i = 0, chunk - 1 do
      local t = str(first + added + i)
      entries[2 * i + 1] = t
      entries[2 * i + 2] = t
    end
    redis.call('ZADD', key, unpack(entries))
    added = added + chunk
  end
  local reset = first + cost - 1 + window - now
  expire(key, reset)
  return {1, quota - count - cost, 0, reset}
end

-- Denied: the (count + cost - quota)-th oldest entry in the window must
-- leave it before the same cost fits.
local oldest = redis.call('ZRANGE', key, '(' .. gone, '+inf', 'BYSCORE', 'LIMIT', str(count + cost - quota - 1), '1')[1]
local newest = redis.call('ZRANGE', key, '-1', '-1')[1]
return {0, math.max(0, quota - count), tonumber(oldest) + window - now, tonumber(newest) + window - now}
