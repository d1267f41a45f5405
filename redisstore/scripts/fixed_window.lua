-- floodgate fixed window (https://github.com/floodgate-rl/floodgate)
--
-- Counts requests in clock-aligned windows of `window_us` microseconds (the
-- window containing now starts at now - now % window_us). It admits up to
-- 2 * quota across a window edge (the boundary burst), and is offered for
-- comparison and compatibility.
--
-- KEYS[1]  the window: a 16-byte STRING, struct.pack('<dd', start, count):
--            start  the start of the current window, in microseconds
--            count  the count admitted in it
--          as two little-endian doubles (integers, exact below 2^53): one
--          GET and one SET PX per decision, and no decimal conversions. A
--          missing key is an empty window.
-- ARGV[1]  "allow" (count the request) or "refund" (take cost back from the
--          count of the window containing now; a refund after the window
--          has moved on changes nothing)
-- ARGV[2]  quota: requests admitted per window (1 .. 2^40)
-- ARGV[3]  window_us: the window, in microseconds
-- ARGV[4]  cost (0 .. quota; 0 reads the window and writes nothing)
-- ARGV[5]  now, in microseconds since the Unix epoch; absent or "" means
--          the server's clock (redis.call('TIME'))
--
-- Reply to "allow": an array of four integers
--   {allowed (1 or 0), remaining, retry_after_us, reset_after_us}
-- where retry_after_us is 0 when allowed and otherwise the time until the
-- next window; reset_after_us is the time until the window ends, or 0 if
-- nothing was counted in it. A denied request writes nothing. An admitted
-- one writes the string with a PX (the same as PEXPIRE) of
-- ceil(reset_after_us / 1000) ms.
-- Reply to "refund": 1 if the key held state, 0 if not.
--
-- Every number is an integer below 2^53 (exact in Lua's doubles); values are
-- written with struct.pack or string.format, never tostring (which keeps only 14
-- significant digits).

local key = KEYS[1]
local start, count = 0, 0
local state = redis.call('GET', key)
if state then
  if #state ~= 16 then
    error({err = 'ERR floodgate: KEYS[1] holds a string of ' .. #state .. ' bytes, not a fixed window (16)'})
  end
  start, count = struct.unpack('<dd', state)
  if not (start >= 0 and count >= 0) then -- NaN fails too
    error({err = 'ERR floodgate: KEYS[1] holds a negative or NaN start or count, not a fixed window'})
  end
elseif op == 'refund' then
  return 0
end

-- Move to the window containing now. A now before start (time ran
-- backwards) counts as start.
local before, elapsed = start, 0
if now >= start then
  local current = now - now % window
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
    local px = ceil((window - elapsed) / 1000)
    redis.call('SET', key, struct.pack('<dd', start, count), 'PX', string.format(px < 2147483648 and '%d' or '%.0f', px))
  end
  return 1
end

if cost == 0 then -- a check that takes nothing: report, write nothing
  local reset = 0
  if count > 0 then
    reset = window - elapsed
  end
  return {1, math.max(0, quota - count), 0, reset}
end
if count + cost <= quota then
  count = count + cost
  -- PX is ceil(reset / 1000) ms; '%d' is exact below 2^31 in any C long,
  -- and several times faster than '%.0f'.
  local px = ceil((window - elapsed) / 1000)
  redis.call('SET', key, struct.pack('<dd', start, count), 'PX', string.format(px < 2147483648 and '%d' or '%.0f', px))
  return {1, quota - count, 0, window - elapsed}
end
local reset = 0
if count > 0 then
  reset = window - elapsed
end
return {0, math.max(0, quota - count), window - elapsed, reset}
