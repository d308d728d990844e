-- record.lua: helpers of the lease scripts, prepended to acquire, renew,
-- renew_many and release (Redis scripts cannot include one another).
--
-- The pause key of a group ({prefix}:{group}:paused, a hash, no expiry)
-- exists while an operator paused the group fleet-wide: no acquire succeeds
-- (not even a re-claim) and no renew extends the lease, so the leader hands
-- over at its next renewal even if it missed the pause notice. Pausing and
-- resuming write nothing else: the record's invariants below are untouched.
--
-- The record of a group (a hash, no expiry) tells a new leader how long the
-- earlier ones may still believe they lead, even when the lease key is gone:
--   token  the last fencing token issued: decimal, at most i64::MAX, and never
--          turned into a Lua number (a double is exact only below 2^53)
--   until  server unix ms until which the last holder (the current one
--          included) may believe it leads: max(until, now + ttl) at every
--          acquire and renew; lowered to max(prior, now) by a clean release
--   prior  server unix ms until which the holders *before* the current one
--          may believe they lead (what a clean release falls back to)
--   run    which server wrote them: its run_id and its replication id
--          (master_replid)
-- A record whose `run` is not this server's is not vouched for: restarted
-- from an RDB or AOF file or restored (a new run_id), promoted from a replica
-- (a new replication id, also when an old primary is promoted back after it
-- resynced from a lagging one). Its times say nothing of renewals that
-- reached the server it came from, so a new leader waits one full ttl, and a
-- renew on it fails (the holder acquires again, with that wait): a renew
-- still in flight from before the copy was taken must not extend a view
-- past a later holder's start. A record of the first format (a string: the
-- token alone) is not vouched for either.

-- The largest token: fits a signed 64-bit column of any store.
local MAX_TOKEN = '9223372036854775807'

-- Server time: unix ms (a Lua number, exact) and unix µs (a decimal string).
local function server_now()
  local t = redis.call('TIME')
  local us = t[1] .. string.format('%06d', tonumber(t[2]))
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), us
end

-- This server's identity: run_id and replication id. A server that shows
-- no run_id cannot vouch for any record, so the scripts fail (closed)
-- rather than guess; one without a replication id (no replication support)
-- is named by its run_id alone.
local function this_run()
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if not run then error('INFO server shows no run_id: cannot vouch for lease records') end
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  if replid then run = run .. '/' .. replid end
  return run
end

-- Whether decimal string a > b (both without leading zeros).
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

-- A token as stored: digits only, no leading zero, at most MAX_TOKEN.
local function valid_token(s)
  return type(s) == 'string' and (s == '0' or string.match(s, '^[1-9]%d*$') ~= nil)
    and not greater(s, MAX_TOKEN)
end

-- Decimal string s + 1, exactly.
local function plus_one(s)
  local i = #s
  while i > 0 and string.sub(s, i, i) == '9' do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #s) end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
end

-- A time field: ms as a Lua number (0 when absent or malformed: only ever
-- read from a record that is vouched for, which these scripts wrote).
local function ms(s)
  return tonumber(s) or 0
end

-- Read the record at key: nil when absent, or {token, until, prior, run,
-- legacy}; or nil and an error message when it cannot be trusted to issue a
-- greater token (nothing has been written then).
local function read_record(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then return nil end
  local rec
  if kind == 'string' then
    rec = {token = redis.call('GET', key), legacy = true}
  elseif kind == 'hash' then
    local f = redis.call('HMGET', key, 'token', 'until', 'prior', 'run')
    rec = {token = f[1], ['until'] = ms(f[2]), prior = ms(f[3]), run = f[4]}
  else
    return nil, 'ERR lease record ' .. key .. ' is a ' .. kind
  end
  if not valid_token(rec.token) then
    return nil, 'ERR lease record ' .. key .. ' holds no valid token'
  end
  return rec
end

-- Whether the group whose pause key is key is paused. (TYPE, not EXISTS:
-- ACL rules written for earlier versions allow TYPE.)
local function paused(key)
  return redis.call('TYPE', key)['ok'] ~= 'none'
end

-- Renew the lease at lease for holder id until now + ttl, if its record is
-- vouched for and the group is not paused (pause key pause): 1 renewed, 0
-- gone, -1 someone else holds it, -2 the record is not vouched for, -3 the
-- group is paused (nothing written for -2 and -3).
local function renew_one(lease, record, pause, id, now, ttl, run)
  local holder = redis.call('GET', lease)
  if holder ~= id then
    if holder then return -1 end
    return 0
  end
  if paused(pause) then return -3 end
  if redis.call('TYPE', record)['ok'] ~= 'hash' then return -2 end
  local f = redis.call('HMGET', record, 'until', 'run')
  if f[2] ~= run then return -2 end
  redis.call('PEXPIRE', lease, ttl)
  redis.call('HSET', record, 'until', string.format('%d', math.max(ms(f[1]), now + ttl)))
  return 1
end
