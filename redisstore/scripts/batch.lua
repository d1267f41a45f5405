-- floodgate batch (https://github.com/floodgate-rl/floodgate)
--
-- Decides the checks of one request together, all or nothing, at one time.
-- Item k is an "allow" of its cost on KEYS[k] under its algorithm and
-- limit. Every algorithm's script is in this one, unchanged, as a function
-- of KEYS and ARGV, so each item is decided exactly as its stand-alone
-- script decides it; the items run in order, each seeing the ones before it
-- (the same key may appear more than once). If any item is denied, the
-- items admitted before and after it are undone before the script returns:
-- the request took nothing, and as a script runs atomically, no other
-- client ever sees some of the items taken and others not.
--
-- KEYS[k]     item k's key: its identity's key for its algorithm. On Redis
--             Cluster all the keys must be in one hash slot.
-- ARGV[1]     now, in microseconds since the Unix epoch, for every item; ""
--             means the server's clock (redis.call('TIME')), read once
-- ARGV[5k-3]  item k's algorithm: "swl" (sliding-window log), "tb" (token
--             bucket), "swc" (sliding-window counter) or "fw" (fixed
--             window), as in the keys' suffixes
-- ARGV[5k-2]  item k's quota (ARGV[2] of its algorithm's script)
-- ARGV[5k-1]  item k's window_us (ARGV[3])
-- ARGV[5k]    item k's cost (ARGV[4])
-- ARGV[5k+1]  item k's refill (ARGV[6] of the token bucket); "" means the
--             capacity, and is what the other algorithms take
-- ARGV[5n+2]  optional: the caller's deadline in microseconds of the
--             server's clock. A call that starts after it records nothing
--             and answers the error reply "DEADLINE ..." (prelude.lua).
--
-- Reply: an array of one entry per item, in order: the item's reply to
-- "allow" as its script gives it,
--   {allowed (1 or 0), remaining, retry_after_us, reset_after_us}
-- or an error reply in its place when the item failed (bad arguments, a key
-- that holds something else, a write refused for maxmemory), with the names
-- of the keys and arguments of this script. An item that failed wrote
-- nothing and denies nothing: if no item is denied, the admitted items stay
-- recorded. If any item is denied, nothing is recorded, and the replies of
-- the items that fit are the ones their admission gave.
--
-- Undo is exact: before an item runs, the script reads its key's expiry
-- (PTTL) and, for the algorithms that keep a string, its value; undoing the
-- item puts back the value and the expiry, or deletes a key that did not
-- exist. A log drops the cost newest entries, which are the ones the item
-- added (nothing else writes while a script runs), and gets its expiry
-- back; entries it trimmed had left the window and stay gone, which changes
-- no decision. The last item needs no record unless an item before it was
-- denied. Redis refuses a script's writes for maxmemory only until its first
-- write, so an item whose write is refused has written nothing, and the
-- writes of an undo, which follow an admitted item's, are never refused.

-- algorithms, the functions above by their keys' suffixes, is written
-- before this code when the script is loaded, from the store's table.
local n = #KEYS
if n == 0 or #ARGV ~= 1 + 5 * n and #ARGV ~= 2 + 5 * n then
  error({err = 'ERR floodgate: a batch takes at least one key, 1 + 5 arguments per key and an optional deadline, got ' .. #ARGV .. ' for ' .. n .. ' keys'})
end
local now, deadline = ARGV[1], ARGV[2 + 5 * n]
local clock
if now == '' or (deadline and deadline ~= '') then
  local t = redis.call('TIME')
  clock = t[1] * 1000000 + t[2]
end
if deadline and deadline ~= '' then
  local d = tonumber(deadline)
  if not d then
    error({err = 'ERR floodgate: ARGV[' .. (2 + 5 * n) .. '] (deadline_us) must be an integer, got "' .. deadline .. '"'})
  elseif clock > d then
    return redis.error_reply('DEADLINE floodgate: the call started ' .. (clock - d) .. 'us after its deadline; nothing was recorded')
  end
end
if now == '' then
  now = clock
else
  now = tonumber(now) -- each item's prelude checks its range
  if not now then
    error({err = 'ERR floodgate: ARGV[1] (now_us) must be an integer of at least 0, got "' .. ARGV[1] .. '"'})
  end
end

local undo, denied = {}, false
-- The KEYS and ARGV of the item being decided: its script reads them only
-- while it runs.
local item_keys, item_argv = {}, {'allow'}

-- decide decides item k as its algorithm's script would. If record is
-- true and the item is admitted, it appends to undo what undoing it takes:
-- {key, pttl, value} for a string, {key, pttl, nil, cost} for a log.
local function decide(k, record)
  local b = 5 * k - 4
  local key, alg = KEYS[k], ARGV[b + 1]
  local script = algorithms[alg]
  if not script then
    error({err = 'ERR floodgate: ARGV[' .. (b + 1) .. '] (algorithm) must be one of ' .. algorithm_names .. ', got "' .. alg .. '"'})
  end
  local saved
  if record then
    if alg == 'swl' then
      saved = {key, redis.call('PTTL', key), nil, ARGV[b + 4]}
    else
      saved = {key, redis.call('PTTL', key), redis.call('GET', key)}
    end
  end
  item_keys[1] = key
  item_argv[2], item_argv[3], item_argv[4], item_argv[5], item_argv[6] = ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], now, ARGV[b + 5]
  local reply = script(item_keys, item_argv)
  if saved and reply[1] == 1 then
    undo[#undo + 1] = saved
  end
  return reply
end

-- rename gives the names of KEYS and ARGV in an error message of item k's
-- script their names in this script.
local function rename(msg, k)
  local names = {['2'] = 5 * k - 2, ['3'] = 5 * k - 1, ['4'] = 5 * k, ['5'] = 1, ['6'] = 5 * k + 1}
  msg = string.gsub(msg, 'KEYS%[1%]', 'KEYS[' .. k .. ']')
  return (string.gsub(msg, 'ARGV%[(%d)%]', function(i)
    if names[i] then
      return 'ARGV[' .. names[i] .. ']'
    end
  end))
end

local replies = {}
for k = 1, n do
  local ok, reply = pcall(decide, k, k < n or denied)
  if ok then
    if reply[1] == 0 then
      denied = true
    end
  else
    -- pcall returns an error reply's message (a table's err in some
    -- versions), or a Lua error's.
    local msg = type(reply) == 'table' and reply.err or reply
    if type(msg) ~= 'string' then
      msg = 'ERR floodgate: item ' .. k .. ' failed'
    elseif string.find(msg, '^ERR floodgate: ') then
      msg = rename(msg, k)
    elseif not string.find(msg, '^%u%u+ ') then -- not an error reply
      msg = 'ERR floodgate: item ' .. k .. ': ' .. msg
    end
    reply = {err = msg}
  end
  replies[k] = reply
end

if denied then
  for u = #undo, 1, -1 do
    local saved = undo[u]
    local key, pttl, value, cost = saved[1], saved[2], saved[3], saved[4]
    -- PTTL is 0 in the millisecond a key expires in; keep it 1 ms more.
    local px = string.format('%.0f', math.max(pttl, 1))
    if cost then
      redis.call('ZREMRANGEBYRANK', key, '-' .. cost, '-1')
      if pttl == -1 then
        redis.call('PERSIST', key)
      elseif pttl >= 0 then
        redis.call('PEXPIRE', key, px) -- a no-op if the key is gone
      end
    elseif not value then
      redis.call('DEL', key)
    elseif pttl == -1 then
      redis.call('SET', key, value)
    else
      redis.call('SET', key, value, 'PX', px)
    end
  end
end
return replies
