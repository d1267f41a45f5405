-- floodgate fixed window (https://github.com/floodgate-rl/floodgate)
--
-- Counts requests in clock-aligned windows of `window_us` microseconds (the
-- window containing now starts at now - now % window_us). It admits up to
-- 2 * quota across a window edge (the boundary burst), and is offered for
-- comparison and compatibility.
--
-- KEYS[1]  the window: a HASH with integer fields
--            s  the start of the current window, in microseconds
--            c  the count admitted in it
--          A missing key is an empty window.
-- ARGV[1]  "allow" (count the request) or "refund" (take cost back from the
--          count of the window containing now; a refund after the window
--          has moved on changes nothing)
-- ARGV[2]  quota: requests admitted per window (1 .. 2^40)
-- ARGV[3]  window_us: the window, in microseconds
-- ARGV[4]  cost (1 .. quota)
-- ARGV[5]  now, in microseconds since the Unix epoch; absent or "" means
--          the server's clock (redis.call('TIME'))
--
-- Reply to "allow": an array of four integers
--   {allowed (1 or 0), remaining, retry_after_us, reset_after_us}
-- where retry_after_us is 0 when allowed and otherwise the time until the
-- next window; reset_after_us is the time until the window ends, or 0 if
-- nothing was counted in it. A denied request writes nothing. An admitted
-- one writes the hash and sets PEXPIRE to ceil(reset_after_us / 1000) ms.
-- Reply to "refund": 1 if the key held state, 0 if not.
--
-- Every number is an integer below 2^53 (exact in Lua's doubles); values are
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
local state = redis.call('HMGET', key, 's', 'c')
if op == 'refund' and not state[1] then
  return 0
end
local start, count = tonumber(state[1]) or 0, tonumber(state[2]) or 0

-- Move to the window containing now. A now before start (time ran
-- backwards) counts as start.
local before, elapsed = start, 0
if now >= start then
  local current = now - fmod(now, window)
  if start ~= current then
    start, count = current, 0
  end
  elapsed = now - current
end

if op == 'refund' then
  if start == before then
    count = math.max(0, count - cost)
  end
  if count == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 's', str(start), 'c', str(count))
    expire(key, window - elapsed)
  end
  return 1
end

if count + cost <= quota then
  count = count + cost
  redis.call('HSET', key, 's', str(start), 'c', str(count))
  expire(key, window - elapsed)
  return {1, quota - count, 0, window - elapsed}
end
local reset = 0
if count > 0 then
  reset = window - elapsed
end
return {0, math.max(0, quota - count), window - elapsed, reset}
