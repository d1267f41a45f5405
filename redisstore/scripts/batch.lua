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
-- Reply: a flat array of four entries per item, in order: the four
-- integers of the item's reply to "allow" as its script gives them,
--   allowed (1 or 0), remaining, retry_after_us, reset_after_us
-- (item k's at 4k-3 .. 4k: one array, as Redis builds an array of arrays
-- at several times the cost), or, when the item failed (bad arguments, a
-- key that holds something else), an error reply and three 0s, the error
-- naming the keys and arguments of this script. An item that failed wrote
-- nothing and denies nothing: if no item is denied, the admitted items stay
-- recorded. If any item is denied, nothing is recorded, and the replies of
-- the items that fit are the ones their admission gave.
--
-- Undo is exact, and mostly not needed. The algorithms that keep a string
-- (tb, swc, fw) run with a redis of the batch's own whose SET waits until
-- every item is decided, and whose GET of a key waiting to be written
-- answers the value waiting: a denied request writes none of them, and an
-- admitted one writes each such key once, with its last item's value and
-- expiry, as the items one after the other would have left it. A log (swl)
-- writes at once: before it runs, the script reads the key's expiry
-- (PTTL), and undoing it drops its cost newest entries, which are the ones
-- it added (nothing else writes while a script runs), and puts the expiry
-- back; entries it trimmed had left the window and stay gone, which
-- changes no decision. The last item writes at once when no item before it
-- was denied, and needs no record. Redis refuses a script's writes for
-- maxmemory only until its first write, and the #!lua shebang makes it
-- refuse such a script before it runs instead, so no write of the batch is
-- refused once it runs.

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

local rcall = redis.call
-- The strings waiting to be written at the end, in order: SET writes[w]
-- writes[w + 1] PX writes[w + 2], for w = 1, 4, 7, ... A batch has few
-- items: finding a key among them is cheaper than keeping a table by key.
local writes, last = {}, 0
-- batched is the redis of an item's script for the algorithms that keep a
-- string: a SET waits, a GET of a waiting key answers its value.
local batched = {error_reply = redis.error_reply}
function batched.call(cmd, key, value, _, px)
  local w = 1
  while w <= last and writes[w] ~= key do
    w = w + 3
  end
  if cmd == 'SET' then -- SET key value PX px: the only write of an "allow"
    if w > last then
      last = w
    end
    writes[w], writes[w + 1], writes[w + 2] = key, value, px
    return 'OK'
  end
  if w <= last then
    return writes[w + 1] -- GET, the only read of an "allow"
  end
  return rcall(cmd, key)
end

-- undo: what undoing a log's item takes, {key, pttl, cost}, in order.
local undo, denied = nil, false

-- The KEYS and ARGV of the item being decided: its script reads them only
-- while it runs.
local item_keys, item_argv = {}, {'allow'}

local replies = {}
for k = 1, n do
  local b = 5 * k - 4
  local key, alg = KEYS[k], ARGV[b + 1]
  local script = algorithms[alg]
  local ok, reply, saved
  local waits = false -- whether key has a string waiting to be written
  for w = 1, last, 3 do
    waits = waits or writes[w] == key
  end
  if not script then
    ok, reply = false, {err = 'ERR floodgate: ARGV[' .. (b + 1) .. '] (algorithm) must be one of ' .. algorithm_names .. ', got "' .. alg .. '"'}
  elseif alg == 'swl' and waits then
    -- A log's key that an earlier item holds a string for: as Redis
    -- answers a log's command on a string.
    ok, reply = false, {err = 'WRONGTYPE Operation against a key holding the wrong kind of value'}
  else
    item_keys[1] = key
    item_argv[2], item_argv[3], item_argv[4], item_argv[5], item_argv[6] = ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], now, ARGV[b + 5]
    local r = batched
    if alg == 'swl' then -- a log writes at once
      r = redis
      if k < n or denied then
        saved = {key, rcall('PTTL', key), ARGV[b + 4]}
      end
    elseif k == n and not denied and not waits then
      r = redis -- the last item: nothing after it can undo it
    end
    ok, reply = pcall(script, item_keys, item_argv, r)
  end
  if ok then
    if reply[1] == 0 then
      denied = true
    elseif saved then
      undo = undo or {}
      undo[#undo + 1] = saved
    end
  else
    -- pcall returns an error reply's message (a table's err in some
    -- versions), or a Lua error's.
    local msg = type(reply) == 'table' and reply.err or reply
    if type(msg) ~= 'string' then
      msg = 'ERR floodgate: item ' .. k .. ' failed'
    elseif string.find(msg, '^ERR floodgate: ') then
      -- The names of KEYS and ARGV in item k's script, in this one.
      local names = {['2'] = 5 * k - 2, ['3'] = 5 * k - 1, ['4'] = 5 * k, ['5'] = 1, ['6'] = 5 * k + 1}
      msg = string.gsub(msg, 'KEYS%[1%]', 'KEYS[' .. k .. ']')
      msg = string.gsub(msg, 'ARGV%[(%d)%]', function(i)
        if names[i] then
          return 'ARGV[' .. names[i] .. ']'
        end
      end)
    elseif not string.find(msg, '^%u%u+ ') then -- not an error reply
      msg = 'ERR floodgate: item ' .. k .. ': ' .. msg
    end
    reply = {{err = msg}, 0, 0, 0}
  end
  local r = 4 * k
  replies[r - 3], replies[r - 2], replies[r - 1], replies[r] = reply[1], reply[2], reply[3], reply[4]
end

if not denied then
  for w = 1, last, 3 do
    rcall('SET', writes[w], writes[w + 1], 'PX', writes[w + 2])
  end
  return replies
end
for u = #(undo or {}), 1, -1 do
  local saved = undo[u]
  local key, pttl = saved[1], saved[2]
  rcall('ZREMRANGEBYRANK', key, '-' .. saved[3], '-1')
  if pttl == -1 then
    rcall('PERSIST', key)
  elseif pttl >= 0 then
    -- PTTL is 0 in the millisecond a key expires in; keep it 1 ms more.
    rcall('PEXPIRE', key, string.format('%.0f', math.max(pttl, 1))) -- a no-op if the key is gone
  end
end
return replies
