-- record.lua: helpers of the lease scripts, prepended to acquire,
-- acquire_many, renew, renew_many, release, claim, once, cron_run and the
-- fenced writes (Redis scripts cannot include one another).
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
--   run    the data history (epoch, below) of the server that wrote them
-- A record whose `run` is not the server's current epoch is not vouched
-- for: restarted from an RDB or AOF file or restored, promoted from a
-- replica (also an old primary promoted back after it resynced from a
-- lagging one). Its times say nothing of renewals that reached the server
-- it came from, so a new leader waits one full ttl, and a renew on it fails
-- (the holder acquires again, with that wait): a renew still in flight from
-- before the copy was taken must not extend a view past a later holder's
-- start. A record of the first format (a string: the token alone) is not
-- vouched for either.
--
-- The server marker (a hash, no expiry; the last key of every script that
-- vouches: {prefix}:server, on a cluster {prefix}:{<tag>}:server in the
-- call's hash slot) names the server's current epoch: one data history,
-- which began when a process first served the fleet or when its data may
-- have gone back in time.
--   run_id   the process that keeps the epoch (INFO server)
--   replid   its replication id when last seen (INFO replication)
--   epoch    the epoch: run_id/replid when it began (a record written
--            before markers existed, by the same process with the same
--            replication id, is vouched for as before)
--   since    server unix ms from which no record can have gone missing
--            (evicted, or lost with the data) without the epoch changing
--   evicted  the server's evicted_keys count when last seen (INFO stats)
--   commands its total_commands_processed when last seen (INFO stats)
--   seen     server unix ms of the last acquire or renew script
-- Every script that vouches checks it once, first:
--   - no marker, another run_id (a restart, a restore, another process
--     promoted), or another replid while master_replid2 is set (this
--     process was promoted: its data was replaced by a resync from another
--     server, a fail-back): a new epoch, since = now;
--   - another replid while master_replid2 is all zeros: the first replica
--     attached to a primary without a backlog, or the backlog was freed
--     repl-backlog-ttl after the last replica left. Same data: the epoch
--     stays, replid follows;
--   - another evicted_keys count (any key evicted, maybe a record, under
--     an allkeys-* policy), a total_commands_processed below the last one
--     seen (CONFIG RESETSTAT, which could hide an eviction), or, in an
--     acquire or renew, no acquire or renew for longer than its ttl (data
--     put back in place by DEBUG RELOAD or a RESTORE of an older backup,
--     which keep the process and its ids; after such a quiet spell no view
--     can still run, so nothing is lost by it): since = now.
-- So a group with no record may lead after max(0, since + ttl - now): a
-- missing record means a group that never led since `since` — unless it
-- was deleted by hand (DEL), or the data put back in place (DEBUG RELOAD,
-- RESTORE) from a copy less than one ttl old, which no server shows.

-- The largest token: fits a signed 64-bit column of any store.
local MAX_TOKEN = '9223372036854775807'

-- Server time: unix ms (a Lua number, exact) and unix µs (a decimal
-- string), read once per script call: every step of one call (the server
-- marker's check, each group of a batch) sees the same instant.
local script_time
local function server_now()
  if not script_time then
    local t = redis.call('TIME')
    script_time = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
      t[1] .. string.format('%06d', tonumber(t[2]))}
  end
  return script_time[1], script_time[2]
end

-- This server's identity: {run_id, replid, promoted, evicted}. A server
-- that shows no run_id cannot vouch for any record, so the scripts fail
-- (closed) rather than guess; one without a replication id (no replication
-- support) is named by its run_id alone.
local function server_identity()
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if not run then error('INFO server shows no run_id: cannot vouch for lease records') end
  local repl = redis.call('INFO', 'replication')
  local replid2 = string.match(repl, 'master_replid2:(%x+)')
  local stats = redis.call('INFO', 'stats')
  return {
    run_id = run,
    replid = string.match(repl, 'master_replid:(%x+)') or '',
    promoted = replid2 ~= nil and string.match(replid2, '^0+$') == nil,
    evicted = string.match(stats, 'evicted_keys:(%d+)') or '',
    commands = string.match(stats, 'total_commands_processed:(%d+)') or '',
  }
end

-- The lease ttl (ms) of the calling script, set by those that carry one
-- (acquire, renew) before anything else: only they keep the marker's
-- `seen`, and check it.
local marker_ttl

-- The server's epoch and since (see above), from the marker at key, which
-- this call checks and updates: read once per script call (epoch_of).
local function check_marker(key, now)
  local id = server_identity()
  local fields = {'run_id', 'replid', 'epoch', 'since', 'evicted', 'seen', 'commands'}
  local m = redis.pcall('HMGET', key, unpack(fields))
  if type(m) == 'table' and m.err then
    -- Another type (WRONGTYPE) is named; a refusal is raised as it is.
    local kind = redis.call('TYPE', key)['ok']
    if kind ~= 'hash' and kind ~= 'none' then
      error('ERR server marker ' .. key .. ' is a ' .. kind)
    end
    m = redis.call('HMGET', key, unpack(fields))
  end
  local now_ms = string.format('%d', now)
  local epoch, since = m[3], tonumber(m[4])
  if not epoch or not since or m[1] ~= id.run_id or (m[2] ~= id.replid and id.promoted) then
    epoch, since = id.run_id, now
    if id.replid ~= '' then epoch = epoch .. '/' .. id.replid end
    redis.call('HSET', key, 'run_id', id.run_id, 'replid', id.replid, 'epoch', epoch,
      'since', now_ms, 'evicted', id.evicted, 'seen', now_ms, 'commands', id.commands)
    return epoch, since
  end
  local fresh = {}
  if m[2] ~= id.replid then fresh[#fresh + 1], fresh[#fresh + 2] = 'replid', id.replid end
  -- Evictions (a record may be gone); statistics reset since the last look
  -- (CONFIG RESETSTAT would hide an eviction: total_commands_processed only
  -- falls then); no lease script for longer than a ttl (the data may have
  -- been put back in place: DEBUG RELOAD, RESTORE of a backup; a fleet idle
  -- that long loses nothing by it, every view has ended).
  local reset = m[5] ~= id.evicted
    or (tonumber(id.commands) or 0) < (tonumber(m[7]) or 0)
    or (marker_ttl ~= nil and now - (tonumber(m[6]) or 0) > marker_ttl)
  if reset then
    since = now
    fresh[#fresh + 1], fresh[#fresh + 2] = 'since', now_ms
    fresh[#fresh + 1], fresh[#fresh + 2] = 'evicted', id.evicted
  end
  if marker_ttl ~= nil or reset then
    fresh[#fresh + 1], fresh[#fresh + 2] = 'commands', id.commands
  end
  if marker_ttl ~= nil then fresh[#fresh + 1], fresh[#fresh + 2] = 'seen', now_ms end
  if #fresh > 0 then redis.call('HSET', key, unpack(fresh)) end
  return epoch, since
end

-- The marker key: the last of KEYS, in every script that vouches (one that
-- does not declare it fails rather than write another key).
local function marker_key()
  local key = KEYS[#KEYS]
  if type(key) ~= 'string' or string.sub(key, -7) ~= ':server' then
    error('ERR lease script called without its server marker key')
  end
  return key
end

-- The server's epoch and since, checked once per script call.
local script_epoch
local function epoch_of()
  if not script_epoch then
    local now = server_now()
    local epoch, since = check_marker(marker_key(), now)
    script_epoch = {epoch = epoch, since = since}
  end
  return script_epoch
end

-- The epoch of this server's data: what a record's `run` must be to be
-- vouched for (see above).
local function this_run()
  return epoch_of().epoch
end

-- Whether this server vouches for the record rec (read_record's, not nil):
-- its writer was this server's run (see above); never a record of the
-- first format.
local function vouched(rec, run)
  return not rec.legacy and rec.run == run
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

-- rec, or nil and an error message when its token is not valid.
local function check_record(key, rec)
  if not valid_token(rec.token) then
    return nil, 'ERR lease record ' .. key .. ' holds no valid token'
  end
  return rec
end

-- Read the record at key: nil when absent, or {token, until, prior, run,
-- legacy}; or nil and an error message when it cannot be trusted to issue a
-- greater token (nothing has been written then).
local function read_record(key)
  local function from(f)
    return {token = f[1], ['until'] = ms(f[2]), prior = ms(f[3]), run = f[4]}
  end
  -- The common case, a hash with a token, in one command; anything else
  -- (no record, the first format, another type, a refused HMGET) is told
  -- apart by TYPE, and a refusal is raised by the same HMGET again.
  local f = redis.pcall('HMGET', key, 'token', 'until', 'prior', 'run')
  if type(f) == 'table' and not f.err and f[1] then return check_record(key, from(f)) end
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then return nil end
  local rec
  if kind == 'string' then
    rec = {token = redis.call('GET', key), legacy = true}
  elseif kind == 'hash' then
    rec = from(redis.call('HMGET', key, 'token', 'until', 'prior', 'run'))
  else
    return nil, 'ERR lease record ' .. key .. ' is a ' .. kind
  end
  return check_record(key, rec)
end

-- Whether the group whose pause key is key is paused. (TYPE, not EXISTS:
-- ACL rules written for earlier versions allow TYPE.) A key of any type
-- pauses, not only a hash written by pause.lua: a pause fails closed (nobody
-- leads, nothing runs twice), so a stray key there costs liveness alone and
-- shows in `leader status` (inspect.lua), where `leader resume` deletes it;
-- hash-only would let a mistyped pause run the group. Fenced writes refuse
-- the name (names.rs, reserved_key), so user code does not write it.
local function paused(key)
  return redis.call('TYPE', key)['ok'] ~= 'none'
end

-- How many groups a batched call names: KEYS holds a triple per group
-- (lease, record, pause key) and the server marker last.
local function group_count()
  return (#KEYS - 1) / 3
end

-- Whether none of the groups whose key triples are KEYS (lease, record,
-- pause) is paused, in one EXISTS per 500 (not one TYPE per group): false
-- when one is, nil when EXISTS is refused (an ACL written for an earlier
-- version, which allows TYPE only): then each group's pause key is checked
-- on its own (paused()).
local function none_paused()
  local n = group_count()
  local count = 0
  for from = 1, n, 500 do
    local keys = {}
    for i = from, math.min(n, from + 499) do keys[#keys + 1] = KEYS[3 * i] end
    local r = redis.pcall('EXISTS', unpack(keys))
    if type(r) ~= 'number' then return nil end
    count = count + r
  end
  return count == 0
end

-- Renew the lease at lease for holder id under the leadership with token
-- (a decimal string) until now + ttl, if its record is vouched for, still
-- names that leadership, and the group is not paused (pause key pause;
-- unpaused: the caller knows it is not, from none_paused()): 1 renewed, 0
-- gone, -1 someone else holds it, or another leadership does (a newer
-- token: our own acquire, sent earlier and run late, re-created a lost key
-- or re-claimed ours), -2 the record is not vouched for, -3 the group is
-- paused (nothing written for -1, -2 and -3). Without the token, a renewal
-- of an ended leadership would extend the lease of a later one.
local function renew_one(lease, record, pause, id, token, now, ttl, run, unpaused)
  local holder = redis.call('GET', lease)
  if holder ~= id then
    if holder then return -1 end
    return 0
  end
  if not unpaused and paused(pause) then return -3 end
  -- No record (all fields nil), or not the run's: not vouched for. Another
  -- type than a hash: WRONGTYPE, told apart from a refusal (raised again).
  local f = redis.pcall('HMGET', record, 'until', 'run', 'token')
  if type(f) == 'table' and f.err then
    if redis.call('TYPE', record)['ok'] ~= 'hash' then return -2 end
    f = redis.call('HMGET', record, 'until', 'run', 'token')
  end
  if f[2] ~= run then return -2 end
  if f[3] ~= token then return -1 end
  redis.call('PEXPIRE', lease, ttl)
  redis.call('HSET', record, 'until', string.format('%d', math.max(ms(f[1]), now + ttl)))
  return 1
end

-- The server's time and identity, read at most once per script call, and
-- only when a group needs them (a follower's refused attempt reads neither):
-- clock() returns {now = unix ms, now_us = unix µs (decimal string), run}.
local function script_clock()
  local c
  return function()
    if not c then
      local now, now_us = server_now()
      c = {now = now, now_us = now_us, run = this_run()}
    end
    return c
  end
end

-- The group at lease (record at record) is not paused and its lease is
-- free or id's own (holder: the lease's value, nil or id): grant it to id
-- for ttl ms, as acquire_one.
local function grant(lease, record, id, ttl, ttl_arg, clock, holder)
  local c = clock()
  local now, now_us, run = c.now, c.now_us, c.run
  local rec, err = read_record(record)
  if err then return nil, err end

  local wait, why, prior = ttl, 'first', now + ttl
  if not rec then
    -- A group that never led since the epoch's `since`, unless it did
    -- before: only the holders from before `since` may still lead.
    wait = math.max(0, epoch_of().since + ttl - now)
    prior = now + wait
    if wait == 0 then why = '' end
  elseif not vouched(rec, run) then
    why = 'unvouched'
  else
    -- A re-claim waits only for the holders before us.
    local earlier = holder and rec.prior or rec['until']
    wait, why, prior = math.max(0, earlier - now), 'early', rec['until']
    if wait == 0 then why = '' end
  end

  -- max(last + 1, now in µs): strictly greater than every earlier token, also
  -- after Redis lost the record.
  local token = now_us
  if rec and not greater(now_us, rec.token) then
    if rec.token == MAX_TOKEN then
      return nil, 'ERR lease record ' .. record .. ': tokens exhausted'
    end
    token = plus_one(rec.token)
  end

  if rec and rec.legacy then redis.call('DEL', record) end
  redis.call('HSET', record, 'token', token, 'until', string.format('%d', math.max(prior, now + ttl)),
    'prior', string.format('%d', prior), 'run', run)
  redis.call('SET', lease, id, 'PX', ttl_arg)
  return {1, token, wait, why, rec and rec.token or ''}
end

-- The PTTL to answer follower id that found the lease at lease held by
-- another with pttl ms left, after the heir rule (backend/heir.rs). Under
-- suspect_below ms (nil: the rule is off) the holder missed a renewal: the
-- first follower to see that is named the group's heir, in the key named as
-- the lease with `heir` for `lease` (so in its hash slot), until grace ms
-- and a second after the lease's expiry. The heir is answered pttl, the
-- others pttl + grace, so that at the expiry only the heir asks. A refused
-- GET or SET there (an ACL rule written before heirs) leaves the rule out.
-- The heir key is not declared in KEYS (one key more per group would make
-- every batched call longer for a key written at a crash only): Redis
-- serves it, being in the declared lease's slot (DEPLOYING.md).
local function after_heir(lease, id, pttl, suspect_below, grace)
  if not suspect_below or pttl < 0 or pttl >= suspect_below then return pttl end
  if string.sub(lease, -6) ~= ':lease' then return pttl end
  local key = string.sub(lease, 1, -6) .. 'heir'
  local heir = redis.pcall('GET', key)
  if heir == false then
    local set = redis.pcall('SET', key, id, 'NX', 'PX', pttl + grace + 1000)
    if type(set) == 'table' and set.err then return pttl end
    heir = id
  elseif type(heir) ~= 'string' then
    return pttl
  end
  if heir == id then return pttl end
  return pttl + grace
end
-- The heir rule's figures among a script's ARGV (from ARGV[i]):
-- suspect_below and grace in ms, or nil (off) when absent.
local function heir_args(i)
  return tonumber(ARGV[i]), tonumber(ARGV[i + 1]) or 0
end
-- Acquire the lease at lease (record at record, pause key pause) for id for
-- ttl ms (ttl_arg: the same, as the caller's string), or re-claim our own;
-- clock: a script_clock(); suspect_below, grace: the heir rule's
-- (heir_args; nil: off). Returns acquire.lua's reply (a table), or nil and
-- an error message when the record is malformed (nothing written then).
local function acquire_one(lease, record, pause, id, ttl, ttl_arg, clock, suspect_below, grace)
  if paused(pause) then return {2, 'paused'} end
  local holder = redis.call('GET', lease)
  if holder and holder ~= id then
    return {0, holder, after_heir(lease, id, redis.call('PTTL', lease), suspect_below, grace)}
  end
  return grant(lease, record, id, ttl, ttl_arg, clock, holder)
end
