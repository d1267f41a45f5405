-- floodgate token bucket (https://github.com/floodgate-rl/floodgate)
--
-- A bucket holds up to `capacity` tokens and refills `refill` tokens every
-- `period_us` microseconds; a request of cost n takes n tokens if the bucket
-- holds them. Tokens are counted in fixed-point units so fractional rates are
-- exact: one token is period_us/g units and one microsecond adds refill/g
-- units, where g = gcd(period_us, refill).
--
-- KEYS[1]  the bucket: a HASH with integer fields
--            l  the level, in units
--            t  the time of the last refill, in microseconds since the epoch
--          A missing key is a full bucket.
-- ARGV[1]  "allow" (take cost tokens) or "refund" (give cost tokens back)
-- ARGV[2]  capacity, in tokens (1 .. 2^40)
-- ARGV[3]  period_us: the refill period, in microseconds
-- ARGV[4]  cost, in tokens (1 .. capacity)
-- ARGV[5]  now, in microseconds since the Unix epoch; absent or "" means
--          the server's clock (redis.call('TIME'))
-- ARGV[6]  refill: tokens added per period; absent or "" means capacity
--
-- Reply to "allow": an array of four integers
--   {allowed (1 or 0), remaining tokens, retry_after_us, reset_after_us}
-- where retry_after_us is 0 when allowed, and otherwise the time until a
-- request of the same cost fits; reset_after_us is the time until the bucket
-- is full again. A denied request writes nothing. An admitted one writes the
-- hash and sets PEXPIRE to ceil(reset_after_us / 1000) ms, so an idle bucket
-- vanishes once it is full.
-- Reply to "refund": 1 if the key held state, 0 if not (nothing to give
-- back: a missing bucket is full). A refund never fills beyond capacity.
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
local refill = quota
if ARGV[6] ~= nil and ARGV[6] ~= '' then
  refill = arg(6, 'refill', 1)
end
local g, b = window, refill
while b ~= 0 do
  g, b = b, fmod(g, b)
end
local unit = window / g -- units per token (exact: g divides window)
local per = refill / g -- units per microsecond
local full = quota * unit
if full > 9007199254740992 then
  fail('capacity times the refill period per token exceeds 2^53 units')
end

local state = redis.call('HMGET', key, 'l', 't')
local level, last = tonumber(state[1]), tonumber(state[2])
if level == nil or last == nil then
  if op == 'refund' then
    return 0
  end
  level, last = full, now -- a new key is a full bucket
end
-- A capacity lowered since the last write: the bucket holds at most full.
level = math.min(level, full)

-- Refill up to now. Time never runs backwards for a bucket.
if now > last then
  if now - last >= ceildiv(full - level, per) then
    level = full
  else
    level = level + (now - last) * per
  end
  last = now
end

if op == 'refund' then
  level = math.min(full, level + cost * unit)
  if level >= full then
    redis.call('DEL', key) -- a full bucket needs no state
  else
    redis.call('HSET', key, 'l', str(level), 't', str(last))
    expire(key, ceildiv(full - level, per))
  end
  return 1
end

local need = cost * unit
if level >= need then
  level = level - need
  local reset = ceildiv(full - level, per)
  redis.call('HSET', key, 'l', str(level), 't', str(last))
  expire(key, reset)
  return {1, floordiv(level, unit), 0, reset}
end
return {0, floordiv(level, unit), ceildiv(need - level, per), ceildiv(full - level, per)}
