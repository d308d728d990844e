-- claim: decide cron ticks of one job, for the leader that holds the lease:
-- claim one to run, or record ticks that will not run (missed, skipped).
-- KEYS[1]  lease key    (see acquire.lua)
-- KEYS[2]  record key   (see record.lua)
-- KEYS[3]  job key      (hash, no expiry):
--            last         the latest tick decided (unix ms): every tick at or
--                         before it ran, runs, or was recorded as not run
--            claim        "<tick> <token>" of the latest tick claimed to run
--            claimer      the id of the job object that claimed it
--            since        unix ms (the claimer's clock) from which this
--                         server process has every decision of the job
--                         (0: all of them)
--            since_token  the token that may still claim ticks before `since`
--            run          run_id of the server process that set `since`
--            busy         "<tick> <token>" of a run in flight (overlap skip)
--            busy_until   server unix ms until which `busy` holds
--            pending:<tick>  a claim whose run has not ended:
--                         "<token> <claimer> <state> <clock> <instance>",
--                         state 'claimed' (its body has not started) or
--                         'started' (cron_start.lua, right before the body
--                         starts, under the same lease); removed when the
--                         run ends (cron_run.lua 'done')
-- KEYS[4]  history key  (list, newest first; entries as cron/history.rs reads them)
-- KEYS[5]  server marker (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  our fencing token (decimal)
-- ARGV[3]  the claimer's clock, unix ms
-- ARGV[4]  'skip' (no tick starts while a run is busy) or 'allow'
-- ARGV[5]  how long a claimed run stays busy unless kept alive, ms
-- ARGV[6]  history length kept
-- ARGV[7]  floor (unix ms, the claimer's clock): no decision before it can
--          have been made since the lease record was (re)created, as far as
--          the claimer knows (see cron.rs)
-- ARGV[8]  restore floor (unix ms, the claimer's clock plus the skew beyond
--          the ttl): no decision after it can have been lost when the job
--          key was restored (see cron.rs)
-- ARGV[9]  when the job was built (unix ms, the claimer's clock): while the
--          job key has no `last`, ticks before it are answered 'taken' and
--          not recorded (ticks from before the job existed)
-- ARGV[10] the claiming job object's id (decimal, drawn when it was built)
-- ARGV[11..] pairs: tick (unix ms), 'run', 'catch-up' or 'miss'; oldest
--          first, at most one 'run' or 'catch-up' and that one last
-- returns  {'lost'}  the lease is not ours (holder or token differ): nothing written
--          else one word per tick:
--            'claimed'  ours to run now
--            'ours'     this job object claimed it under this token and
--                       its body has not started (a retry after a lost
--                       reply, or after a start that failed; not a job built
--                       again under the same leadership, whose predecessor
--                       may still start it)
--            'taken'    decided before (run or recorded) by someone, or
--                       before the job was built and nothing decided yet
--            'refused'  this server process cannot vouch that nobody ran it
--                       (data restored or lost): recorded as missed
--            'missed'   recorded as missed, as asked
--            'busy'     a run is in flight: recorded as skipped (overlap)
--            'wait'     a 'catch-up' while a run is in flight: left undecided
--                       (not recorded, `last` not moved), to run after it
-- Claimed, not run: a claim by an older token still 'claimed' can never
-- start (cron_start.lua checks the lease holds the claim's token, and that
-- token never holds it again), so it is decided again here, as the ticks of
-- a gap: recorded 'abandoned' (under the old claim's token and instance),
-- then run, recorded 'missed' or skipped as the request asks. Its busy mark
-- is dropped at once: no run of it is in flight. One before the request's
-- first tick (which the claimer will not ask about) is recorded 'abandoned'
-- and 'missed'. A 'started' claim of an older token is forgotten (its tick
-- stays decided). Ticks before `since` (a restored job key: the claim may
-- have started since it was saved) are refused, whoever asks.
-- The lease record carries a field named after the job key once the job
-- claimed under it: a record without it was created (first election, or
-- after the data was lost) since the job's last claim, so its decisions
-- before ARGV[7] may be lost with it.
-- A job key written by another server process (restart from disk, failover,
-- restore) may have lost decisions made after it was saved: ticks before
-- the first claim seen by this process (ARGV[8]: its clock plus the skew
-- beyond the ttl) are refused, except to the leader
-- of the saved key's last claim (if it still leads, it remembers what it ran
-- itself since). A missing job key is new, or was lost with the lease
-- record: then the new leader's view began after a safe start, and the
-- leader never looks back before that (see cron.rs). A job key missing
-- while the record carries its mark was lost on its own (eviction, a DEL):
-- ticks before ARGV[8] are refused to everyone.
if redis.replicate_commands then redis.replicate_commands() end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'lost'} end
local rec, err = read_record(KEYS[2])
if err then return redis.error_reply(err) end
if rec == nil or rec.token ~= ARGV[2] then return {'lost'} end
local now = server_now()
local run = this_run()
local token, clock = ARGV[2], ARGV[3]

local f = redis.call('HMGET', KEYS[3], 'last', 'claim', 'since', 'since_token', 'run', 'busy', 'busy_until', 'claimer')
local last, claim = tonumber(f[1]), f[2]
local since, since_token = tonumber(f[3]) or 0, f[4]
local marked = redis.call('HGET', KEYS[2], KEYS[3])
if not marked then
  since, since_token = tonumber(ARGV[7]) or 0, ''
  redis.call('HSET', KEYS[2], KEYS[3], '1')
  redis.call('HSET', KEYS[3], 'since', string.format('%d', since), 'since_token', since_token, 'run', run)
elseif f[5] ~= run then
  if f[5] then
    -- Restored or promoted: decisions made after it was saved may be lost.
    -- Only the leader of the saved claim, if it still leads, may look back.
    since = tonumber(ARGV[8]) or 0
    since_token = claim and string.match(claim, ' (%d+)$') or ''
  elseif f[1] or f[2] then
    -- Written before `run` was kept: its decisions are all here.
    since, since_token = 0, ''
  else
    -- Gone while the record still carries its mark (a new job key is never
    -- marked): evicted or deleted on its own, with every decision in it.
    -- As after a restore, but nobody may look back (its claim is gone too).
    since, since_token = tonumber(ARGV[8]) or 0, ''
  end
  redis.call('HSET', KEYS[3], 'since', string.format('%d', since), 'since_token', since_token, 'run', run)
end
local busy = f[6]
if busy and (tonumber(f[7]) or 0) <= now then busy = nil end

local function record(tick, outcome)
  redis.call('LPUSH', KEYS[4], table.concat({tick, token, clock, '0', outcome, ARGV[1], ''}, '\t'))
end

-- The pending claims, by tick: {token, claimer, state, clock, instance}.
local pending = {}
local fields = redis.call('HKEYS', KEYS[3])
for _, field in ipairs(fields) do
  local tick = string.match(field, '^pending:(%-?%d+)$')
  if tick then
    local v = redis.call('HGET', KEYS[3], field)
    local pt, pc, ps, pk, pi = string.match(v, '^(%d+) (%d+) (%a+) (%-?%d+) (.*)$')
    if pt then
      pending[tick] = {token = pt, claimer = pc, state = ps, clock = pk, instance = pi}
    end
  end
end
local function unclaim(tick, p)
  redis.call('HDEL', KEYS[3], 'pending:' .. tick)
  pending[tick] = nil
  if busy == tick .. ' ' .. p.token then
    busy = nil
    redis.call('HDEL', KEYS[3], 'busy', 'busy_until')
  end
end
local function abandoned(tick, p)
  redis.call('LPUSH', KEYS[4], table.concat({tick, p.token, p.clock, '0', 'abandoned', p.instance, ''}, '\t'))
end
local first = tonumber(ARGV[11])
local order = {}
for tick in pairs(pending) do order[#order + 1] = tick end
table.sort(order, function(a, b) return tonumber(a) < tonumber(b) end)
for _, tick in ipairs(order) do
  local p = pending[tick]
  if greater(token, p.token) then
    if p.state ~= 'claimed' then
      redis.call('HDEL', KEYS[3], 'pending:' .. tick)
      pending[tick] = nil
    elseif first and tonumber(tick) < first then
      unclaim(tick, p)
      if tonumber(tick) >= since then abandoned(tick, p) end
      record(tick, 'missed')
    elseif busy == tick .. ' ' .. p.token then
      busy = nil
      redis.call('HDEL', KEYS[3], 'busy', 'busy_until')
    end
  end
end

-- Claim tick to run: the job's latest claim, pending ('claimed') until
-- its body starts, and busy (overlap skip).
local function claimed(tick)
  claim = tick .. ' ' .. token
  redis.call('HSET', KEYS[3], 'claim', claim, 'claimer', ARGV[10],
    'pending:' .. tick, table.concat({token, ARGV[10], 'claimed', clock, ARGV[1]}, ' '))
  if ARGV[4] == 'skip' then
    busy = claim
    redis.call('HSET', KEYS[3], 'busy', busy,
      'busy_until', string.format('%d', now + tonumber(ARGV[5])))
  end
end

local created = last == nil and tonumber(ARGV[9]) or nil
local out = {}
for i = 11, #ARGV - 1, 2 do
  local tick, mode = ARGV[i], ARGV[i + 1]
  local t = tonumber(tick)
  local runs = mode == 'run' or mode == 'catch-up'
  local r
  local p = t and pending[tick]
  local mine = p and p.state == 'claimed' and p.token == token and p.claimer == ARGV[10]
  local older = p and p.state == 'claimed' and greater(token, p.token)
  if mine and runs and not (ARGV[4] == 'skip' and busy and busy ~= tick .. ' ' .. token) then
    -- Claimed by this job object under this token, not started: a retry
    -- after a lost reply or a failed start. Its busy mark again, if gone
    -- (another run's: decided again below, as any tick then).
    r = 'ours'
    if ARGV[4] == 'skip' and not busy then
      busy = tick .. ' ' .. token
      redis.call('HSET', KEYS[3], 'busy', busy,
        'busy_until', string.format('%d', now + tonumber(ARGV[5])))
    end
  elseif (mine or older) and t < since then
    unclaim(tick, p)
    r = 'refused'
    record(tick, 'missed')
  elseif (mine or older) and mode == 'catch-up' and ARGV[4] == 'skip' and busy then
    r = 'wait'
  elseif mine or older then
    -- Claimed, never started: decided again (see above).
    unclaim(tick, p)
    if older then abandoned(tick, p) end
    if not last or t > last then last = t end
    if not runs then
      r = 'missed'
      record(tick, 'missed')
    elseif ARGV[4] == 'skip' and busy then
      r = 'busy'
      record(tick, 'skipped-overlap')
    else
      r = 'claimed'
      claimed(tick)
    end
  elseif t == nil or (last and t <= last) or (created and t < created) then
    r = 'taken'
  elseif mode == 'catch-up' and ARGV[4] == 'skip' and busy
      and not (t < since and token ~= since_token) then
    r = 'wait'
  else
    last = t
    if t < since and token ~= since_token then
      r = 'refused'
      record(tick, 'missed')
    elseif not runs then
      r = 'missed'
      record(tick, 'missed')
    elseif ARGV[4] == 'skip' and busy then
      r = 'busy'
      record(tick, 'skipped-overlap')
    else
      r = 'claimed'
      claimed(tick)
    end
  end
  out[#out + 1] = r
end
if last then redis.call('HSET', KEYS[3], 'last', string.format('%d', last)) end
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
return out
