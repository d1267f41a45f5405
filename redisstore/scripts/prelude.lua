-- BEGIN prelude (redisstore/scripts/prelude.lua: every floodgate script has it)
--
-- It reads and checks the arguments every algorithm takes. Each script is
-- its algorithm's contract, this prelude, then the algorithm's code.
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
--
-- ARGV[7], optional for every algorithm, is the caller's deadline in
-- microseconds of the server's clock (ARGV[6] is then "" for the algorithms
-- that take none). A call that starts after it records nothing and answers
-- the error reply "DEADLINE ...": its caller has given up on it.
local MAX = 9007199254740992 -- 2^53: integers up to it are exact in a double
local floor, ceil = math.floor, math.ceil

local op, cost = ARGV[1], 1
local quota, window = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[4] ~= '1' then -- comparing interned strings is one pointer test
  cost = tonumber(ARGV[4])
end
local now, deadline = ARGV[5], ARGV[7]
if now == nil or now == '' or (deadline and deadline ~= '') then
  local t = redis.call('TIME')
  local clock = t[1] * 1000000 + t[2]
  if deadline and deadline ~= '' then
    local d = tonumber(deadline)
    if not d then
      error({err = 'ERR floodgate: ARGV[7] (deadline_us) must be an integer, got "' .. deadline .. '"'})
    end
    if clock > d then
      return redis.error_reply('DEADLINE floodgate: the call started ' .. (clock - d) .. 'us after its deadline; nothing was recorded')
    end
  end
  if now == nil or now == '' then
    now = clock
  else
    now = tonumber(now)
  end
else
  now = tonumber(now)
end
-- nil and NaN fail every comparison, so one test covers every argument.
if not ((op == 'allow' or op == 'refund') and quota and window and cost and now
    and quota >= 1 and quota <= MAX and quota % 1 == 0
    and window >= 1 and window <= MAX and window % 1 == 0
    and cost >= 0 and cost <= MAX and cost % 1 == 0
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
    if i == 4 then
      lo = 0 -- a cost of 0 reads the key and writes nothing
    elseif i == 5 then
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
-- END prelude
