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
--            'ours'     this job object claimed it before (a retry after a
--                       lost reply; not a job built again under the same
--                       leadership, which would run it twice)
--            'taken'    decided before (run or recorded) by someone, or
--                       before the job was built and nothing decided yet
--            'refused'  this server process cannot vouch that nobody ran it
--                       (data restored or lost): recorded as missed
--            'missed'   recorded as missed, as asked
--            'busy'     a run is in flight: recorded as skipped (overlap)
--            'wait'     a 'catch-up' while a run is in flight: left undecided
--                       (not recorded, `last` not moved), to run after it
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

local created = last == nil and tonumber(ARGV[9]) or nil
local out = {}
for i = 11, #ARGV - 1, 2 do
  local tick, mode = ARGV[i], ARGV[i + 1]
  local t = tonumber(tick)
  local runs = mode == 'run' or mode == 'catch-up'
  local r
  -- Ours only while it is still the newest decided tick: a retry after a
  -- lost reply. Once later ticks were decided (skipped while it ran), it
  -- ran: a plan that reaches it again (after a run of more than the
  -- look-back) must not run it twice.
  if runs and claim == tick .. ' ' .. token and f[8] == ARGV[10] and last and t == last then
    r = 'ours'
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
      claim = tick .. ' ' .. token
      f[8] = ARGV[10]
      redis.call('HSET', KEYS[3], 'claim', claim, 'claimer', ARGV[10])
      if ARGV[4] == 'skip' then
        busy = claim
        redis.call('HSET', KEYS[3], 'busy', busy,
          'busy_until', string.format('%d', now + tonumber(ARGV[5])))
      end
    end
  end
  out[#out + 1] = r
end
if last then redis.call('HSET', KEYS[3], 'last', string.format('%d', last)) end
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
return out
