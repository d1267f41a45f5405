-- floodgate token bucket (https://github.com/floodgate-rl/floodgate)
--
-- A bucket holds up to `capacity` tokens and refills `refill` tokens every
-- `period_us` microseconds; a request of cost n takes n tokens if the bucket
-- holds them. Tokens are counted in fixed-point units so fractional rates are
-- exact: one token is period_us/g units and one microsecond adds refill/g
-- units, where g = gcd(period_us, refill).
--
-- KEYS[1]  the bucket: a 16-byte STRING, struct.pack('<dd', level, last):
--            level  the tokens held, in units
--            last   the time of the last refill, in microseconds since the
--                   epoch
--          as two little-endian doubles (integers, exact below 2^53). One
--          string read with GET and written with SET PX is the fewest
--          commands per decision, and binary numbers cost no formatting or
--          parsing: both are most of a decision's Redis CPU. A missing key
--          is a full bucket.
-- ARGV[1]  "allow" (take cost tokens) or "refund" (give cost tokens back)
-- ARGV[2]  capacity, in tokens (1 .. 2^40)
-- ARGV[3]  period_us: the refill period, in microseconds
-- ARGV[4]  cost, in tokens (0 .. capacity; 0 reads the key and writes nothing)
-- ARGV[5]  now, in microseconds since the Unix epoch; absent or "" means
--          the server's clock (redis.call('TIME'))
-- ARGV[6]  refill: tokens added per period; absent or "" means capacity
--
-- Reply to "allow": an array of four integers
--   {allowed (1 or 0), remaining tokens, retry_after_us, reset_after_us}
-- where retry_after_us is 0 when allowed, and otherwise the time until a
-- request of the same cost fits; reset_after_us is the time until the bucket
-- is full again. A denied request writes nothing. An admitted one writes the
-- string with a PX (the same as PEXPIRE) of ceil(reset_after_us / 1000) ms,
-- so an idle bucket vanishes once it is full.
-- Reply to "refund": 1 if the key held state, 0 if not (nothing to give
-- back: a missing bucket is full). A refund never fills beyond capacity.
--
-- Every number is an integer below 2^53 (exact in Lua's doubles); values are
-- written with string.format or struct.pack, never tostring (which keeps only 14
-- significant digits).

local key = KEYS[1]
local refill = quota
if ARGV[6] ~= nil and ARGV[6] ~= '' then
  refill = tonumber(ARGV[6])
  if not (refill and refill >= 1 and refill <= MAX and refill % 1 == 0) then
    error({err = 'ERR floodgate: ARGV[6] (refill) must be an integer of at least 1, got "' .. ARGV[6] .. '"'})
  end
end
local g, b = window, refill
while b ~= 0 do
  g, b = b, g % b
end
local unit = window / g -- units per token (exact: g divides window)
local per = refill / g -- units per microsecond
local full = quota * unit
if full > MAX then
  error({err = 'ERR floodgate: capacity times the refill period per token exceeds 2^53 units'})
end

local level, last
local state = redis.call('GET', key)
if state then
  if #state ~= 16 then
    error({err = 'ERR floodgate: KEYS[1] holds a string of ' .. #state .. ' bytes, not a token bucket (16)'})
  end
  level, last = struct.unpack('<dd', state)
  if not (level >= 0 and last >= 0) then -- NaN fails too
    error({err = 'ERR floodgate: KEYS[1] holds a negative or NaN level or time, not a token bucket'})
  end
  -- A capacity lowered since the last write: the bucket holds at most full.
  if level > full then
    level = full
  end
elseif op == 'refund' then
  return 0
else
  level, last = full, now -- a new key is a full bucket
end

-- Refill up to now. Time never runs backwards for a bucket. A product
-- beyond 2^53 is inexact but then far beyond full, which caps it.
if now > last then
  level = level + (now - last) * per
  if level > full then
    level = full
  end
  last = now
end

if op == 'refund' then
  level = level + cost * unit
  if level >= full then
    redis.call('DEL', key) -- a full bucket needs no state
  else
    local px = ceil(ceil((full - level) / per) / 1000)
    redis.call('SET', key, struct.pack('<dd', level, last), 'PX', string.format(px < 2147483648 and '%d' or '%.0f', px))
  end
  return 1
end

if cost == 0 then -- a check that takes nothing: report, write nothing
  return {1, floor(level / unit), 0, ceil((full - level) / per)}
end
local need = cost * unit
if level >= need then
  level = level - need
  local reset = ceil((full - level) / per) -- >= 1: level < full
  -- PX is ceil(reset / 1000) ms; '%d' is exact below 2^31 in any C long,
  -- and several times faster than '%.0f'.
  local px = ceil(reset / 1000)
  redis.call('SET', key, struct.pack('<dd', level, last), 'PX', string.format(px < 2147483648 and '%d' or '%.0f', px))
  return {1, floor(level / unit), 0, reset}
end
return {0, floor(level / unit), ceil((need - level) / per), ceil((full - level) / per)}
