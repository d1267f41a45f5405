-- floodgate sliding-window counter (https://github.com/floodgate-rl/floodgate)
--
-- Counts requests in clock-aligned windows of `window_us` microseconds and
-- weights the previous window's count by the share of it still inside the
-- sliding window that ends at now: a request of cost n at elapsed time e
-- into the current window fits if
--     previous * (window - e) <= (quota - current - n) * window
-- computed in doubles. The retry time is found by binary search over e, and
-- remaining subtracts ceil(previous * (window - e) / window).
--
-- KEYS[1]  the counter: a 24-byte STRING,
--          struct.pack('<ddd', start, current, previous):
--            start     the start of the current window, in microseconds
--            current   the count admitted in the current window
--            previous  the count admitted in the previous window
--          as little-endian doubles (integers, exact below 2^53): one GET
--          and one SET PX per decision, and no decimal conversions. A
--          missing key is an empty counter.
-- ARGV[1]  "allow" (count the request) or "refund" (take cost back from the
--          window it was counted in, if that is the current or the
--          previous one)
-- ARGV[2]  quota: requests admitted per window (1 .. 2^40)
-- ARGV[3]  window_us: the window, in microseconds
-- ARGV[4]  cost (0 .. quota; 0 reads the key and writes nothing)
-- ARGV[5]  now, in microseconds since the Unix epoch; absent or "" means
--          the server's clock (redis.call('TIME'))
--
-- Reply to "allow": an array of four integers
--   {allowed (1 or 0), remaining, retry_after_us, reset_after_us}
-- where retry_after_us is 0 when allowed and otherwise the exact time until
-- the same cost fits; reset_after_us is the time until both windows' counts
-- stop weighing. A denied request writes nothing. An admitted one writes the
-- string with a PX (the same as PEXPIRE) of ceil(reset_after_us / 1000) ms.
-- Reply to "refund": 1 if the key held state, 0 if not.
--
-- Every number is an integer below 2^53 (exact in Lua's doubles); values are
-- written with struct.pack or string.format, never tostring (which keeps only 14
-- significant digits).

local key = KEYS[1]
local start, current, previous = 0, 0, 0
local state = redis.call('GET', key)
if state then
  if #state ~= 24 then
    error({err = 'ERR floodgate: KEYS[1] holds a string of ' .. #state .. ' bytes, not a sliding-window counter (24)'})
  end
  start, current, previous = struct.unpack('<ddd', state)
  if not (start >= 0 and current >= 0 and previous >= 0) then -- NaN fails too
    error({err = 'ERR floodgate: KEYS[1] holds a negative or NaN start or count, not a sliding-window counter'})
  end
elseif op == 'refund' then
  return 0
end

-- Move to the window containing now. A now before start (time ran
-- backwards) counts as start.
local before, elapsed = start, 0
if now >= start then
  local s = now - now % window
  if start == s - window then
    start, previous, current = s, current, 0
  elseif start ~= s then
    start, previous, current = s, 0, 0
  end
  elapsed = now - s
end

local function reset_after()
  if current > 0 then
    return 2 * window - elapsed
  elseif previous > 0 then
    return window - elapsed
  end
  return 0
end

if op == 'refund' then
  if start == before then
    current = math.max(0, current - cost)
  elseif start == before + window then
    previous = math.max(0, previous - cost)
  end
  local reset = reset_after()
  if reset == 0 then
    redis.call('DEL', key)
  else
    local px = ceil(reset / 1000)
    redis.call('SET', key, struct.pack('<ddd', start, current, previous), 'PX', string.format(px < 2147483648 and '%d' or '%.0f', px))
  end
  return 1
end

-- fits reports whether cost fits at elapsed time e given the counts.
local function fits(prev, cur, e)
  local free = quota - cur - cost
  if free < 0 then
    return false
  end
  return prev * (window - e) <= free * window
end

-- first_fit returns the smallest e in [lo, hi] at which fits holds, given
-- that it holds at hi (fits is monotone in e).
local function first_fit(prev, cur, lo, hi)
  while lo < hi do
    local mid = lo + floor((hi - lo) / 2)
    if fits(prev, cur, mid) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

if cost == 0 then -- a check that takes nothing: report, write nothing
  return {1, math.max(0, quota - current - math.ceil(previous * (window - elapsed) / window)), 0, reset_after()}
end
local allowed, retry = 0, 0
if fits(previous, current, elapsed) then
  allowed = 1
  current = current + cost
elseif quota - current - cost >= 0 then
  -- Fits later in this window, once the previous window weighs less.
  retry = first_fit(previous, current, elapsed + 1, window) - elapsed
else
  -- Fits in the next window, where this window's count is the previous.
  retry = window - elapsed + first_fit(current, 0, 0, window)
end
local weighted = math.ceil(previous * (window - elapsed) / window)
local reset = reset_after()
if allowed == 1 then
  -- PX is ceil(reset / 1000) ms; '%d' is exact below 2^31 in any C long,
  -- and several times faster than '%.0f'.
  local px = ceil(reset / 1000)
  redis.call('SET', key, struct.pack('<ddd', start, current, previous), 'PX', string.format(px < 2147483648 and '%d' or '%.0f', px))
end
return {allowed, math.max(0, quota - current - weighted), retry, reset}
