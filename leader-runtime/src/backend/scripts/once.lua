-- once: the fleet-wide result of a run-once body (see once.rs), written only
-- under the name's lease (record.lua prepended).
-- KEYS[1]  lease key    (see acquire.lua)
-- KEYS[2]  record key   (see record.lua)
-- KEYS[3]  result key   (hash, no expiry):
--            attempts       attempts started, a crashed one included
--            started_token  the token of the latest attempt started
--            failures       attempts that ended with an error
--            failed_token   the token of the latest failure recorded
--            error          the latest failure's text (redacted by the caller)
--            done_token     the token the body succeeded under (absent: not done)
--            done_by        the instance id of that runner
--            done_at        server unix ms when the success was recorded
--            summary        the body's summary
--            running_until  server unix ms until which the latest attempt's
--                           runner, deposed while its body runs, said it
--                           still runs ('alive')
-- KEYS[4]  server marker (see record.lua)
-- ARGV[1]  'begin' (the lease holder's step), 'done', 'fail', 'alive' (the
--          latest attempt's runner, with or without the lease), 'read' or 'reset'
-- ARGV[2]  our instance id     (begin, done, fail, alive); read, reset: the
--          lease's ttl in ms
-- ARGV[3]  our fencing token   (begin, done, fail, alive; decimal, compared as a string)
-- ARGV[4]  begin: the caller's attempt limit; done: the summary; fail: the error text;
--          alive: the ttl in ms
-- returns  {verdict, attempts, failures, error, done_token, done_by, done_at, summary}
--          (every value a string, '' when absent):
--   'done'    the body succeeded (recorded now, or before): nothing was written
--             unless it was recorded now; checked first, whoever asks
--   'lost'    begin: the lease is not ours under that token; done, fail,
--             alive: the latest attempt is not ours (or alive: it ended).
--             Nothing written
--   'run'     begin: the attempt is ours, counted (or was: a retry of our own
--             begin after a lost reply counts nothing); alive: noted
--   'failed'  begin: `attempts` reached the limit and no attempt may still
--             run; nothing written
--   'open'    fail: recorded (a retry of our own fail counts nothing);
--             read: no attempt may still run; reset: done
--   'held'    read: an attempt may still run; begin: `attempts` reached the
--             limit, but the latest attempt may still run (ask again later)
--   'busy'    reset: an attempt may still run: nothing written (it must stay
--             counted)
-- An attempt may still run while somebody holds the lease, while the last
-- holder may still believe it leads (the record's `until` not passed, or a
-- record this server cannot vouch for: the lease key may have been lost
-- early, by eviction or a DEL), and while the latest attempt's runner,
-- deposed mid-body, keeps saying so ('alive', until `running_until`) and
-- has recorded no outcome. Only then is failure concluded from the count:
-- a waiter's 'read' answers 'open', a new holder's begin 'failed'. The
-- outcome of an attempt is recorded whenever it is still the latest one,
-- with or without the lease: a later attempt starts only under a later
-- token, so nothing else can have run since.
if redis.replicate_commands then redis.replicate_commands() end
local f = redis.call('HMGET', KEYS[3], 'attempts', 'failures', 'error', 'done_token',
  'done_by', 'done_at', 'summary', 'started_token', 'failed_token', 'running_until')
local s = {
  attempts = tonumber(f[1]) or 0, failures = tonumber(f[2]) or 0, error = f[3] or '',
  done_token = f[4] or '', done_by = f[5] or '', done_at = f[6] or '', summary = f[7] or '',
}
local started_token, failed_token = f[8] or '', f[9] or ''
local running_until = tonumber(f[10]) or 0
local function reply(verdict)
  return {verdict, string.format('%d', s.attempts), string.format('%d', s.failures), s.error,
    s.done_token, s.done_by, s.done_at, s.summary}
end

-- Whether the latest attempt's runner, deposed mid-body, said it still runs.
local function attempt_alive(now)
  return started_token ~= '' and failed_token ~= started_token and running_until > now
end

-- Whether an attempt may still run although nobody holds the lease (see
-- above); ttl: the lease's, in ms. With no record (evicted or lost with the
-- lease), as acquire's grant: until one ttl after the server marker's since.
local function may_run(now, ttl)
  local rec, err = read_record(KEYS[2])
  if err then return nil, err end
  if rec and (not vouched(rec, this_run()) or rec['until'] > now) then return true end
  if not rec and now < epoch_of().since + ttl then return true end
  return attempt_alive(now)
end

local op = ARGV[1]
if s.done_token ~= '' then return reply('done') end
local holder = redis.call('GET', KEYS[1])
if op == 'read' or op == 'reset' then
  local running = holder ~= false
  if not running then
    local ttl = tonumber(ARGV[2])
    if not ttl then return redis.error_reply('ERR once: ' .. op .. ' needs the ttl') end
    local err
    running, err = may_run(server_now(), ttl)
    if err then return redis.error_reply(err) end
  end
  if op == 'read' then
    if running then return reply('held') end
    return reply('open')
  end
  if running then return reply('busy') end
  s.attempts, s.failures, s.error = 0, 0, ''
  redis.call('HSET', KEYS[3], 'attempts', '0', 'failures', '0', 'error', '')
  return reply('open')
end

if op == 'done' or op == 'fail' or op == 'alive' then
  if started_token ~= ARGV[3] then return reply('lost') end
  if op == 'done' then
    local now = server_now()
    s.done_token, s.done_by, s.done_at, s.summary = ARGV[3], ARGV[2], string.format('%d', now), ARGV[4]
    redis.call('HSET', KEYS[3], 'done_token', s.done_token, 'done_by', s.done_by,
      'done_at', s.done_at, 'summary', s.summary)
    return reply('done')
  elseif op == 'fail' then
    if failed_token ~= ARGV[3] then s.failures = s.failures + 1 end
    s.error = ARGV[4]
    redis.call('HSET', KEYS[3], 'failures', string.format('%d', s.failures),
      'failed_token', ARGV[3], 'error', s.error)
    return reply('open')
  end
  if failed_token == ARGV[3] then return reply('lost') end
  local ttl = tonumber(ARGV[4])
  if not ttl then return redis.error_reply('ERR once: alive needs a ttl') end
  local now = server_now()
  redis.call('HSET', KEYS[3], 'running_until', string.format('%d', math.max(running_until, now + ttl)))
  return reply('run')
end

if op ~= 'begin' then
  return redis.error_reply('ERR once: unknown operation ' .. tostring(op))
end
if holder ~= ARGV[2] then return reply('lost') end
local rec, err = read_record(KEYS[2])
if err then return redis.error_reply(err) end
if rec == nil or rec.token ~= ARGV[3] then return reply('lost') end
if started_token == ARGV[3] then return reply('run') end
if s.attempts >= (tonumber(ARGV[4]) or 0) then
  if attempt_alive(server_now()) then return reply('held') end
  return reply('failed')
end
s.attempts = s.attempts + 1
s.error = 'attempt ' .. s.attempts .. ' (instance ' .. ARGV[2] .. ', token ' .. ARGV[3]
  .. ') ended without a result: its runner stopped or lost the lease'
redis.call('HSET', KEYS[3], 'attempts', string.format('%d', s.attempts),
  'started_token', ARGV[3], 'error', s.error)
return reply('run')
