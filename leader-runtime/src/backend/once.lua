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
-- ARGV[1]  'begin', 'done', 'fail' or 'reset'
-- ARGV[2]  our instance id     (begin, done, fail)
-- ARGV[3]  our fencing token   (begin, done, fail; decimal, compared as a string)
-- ARGV[4]  begin: the caller's attempt limit; done: the summary; fail: the error text
-- returns  {verdict, attempts, failures, error, done_token, done_by, done_at, summary}
--          (every value a string, '' when absent):
--   'done'    the body succeeded (recorded now, or before): nothing was written
--             unless it was recorded now; checked first, whoever asks
--   'lost'    the lease is not ours under that token: nothing written
--   'run'     begin: the attempt is ours, counted (or was: a retry of our own
--             begin after a lost reply counts nothing)
--   'failed'  begin: `attempts` reached the limit; nothing written
--   'open'    fail: recorded (a retry of our own fail counts nothing); reset: done
-- Under the lease nobody else runs an attempt, so every attempt counted
-- before ours has ended: `attempts` is what the limit is compared with.
if redis.replicate_commands then redis.replicate_commands() end
local f = redis.call('HMGET', KEYS[3], 'attempts', 'failures', 'error', 'done_token',
  'done_by', 'done_at', 'summary', 'started_token', 'failed_token')
local s = {
  attempts = tonumber(f[1]) or 0, failures = tonumber(f[2]) or 0, error = f[3] or '',
  done_token = f[4] or '', done_by = f[5] or '', done_at = f[6] or '', summary = f[7] or '',
}
local started_token, failed_token = f[8] or '', f[9] or ''
local function reply(verdict)
  return {verdict, string.format('%d', s.attempts), string.format('%d', s.failures), s.error,
    s.done_token, s.done_by, s.done_at, s.summary}
end

local op = ARGV[1]
if s.done_token ~= '' then return reply('done') end
if op == 'reset' then
  s.attempts, s.failures, s.error = 0, 0, ''
  redis.call('HSET', KEYS[3], 'attempts', '0', 'failures', '0', 'error', '')
  return reply('open')
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return reply('lost') end
local rec, err = read_record(KEYS[2])
if err then return redis.error_reply(err) end
if rec == nil or rec.token ~= ARGV[3] then return reply('lost') end

if op == 'begin' then
  if started_token == ARGV[3] then return reply('run') end
  if s.attempts >= (tonumber(ARGV[4]) or 0) then return reply('failed') end
  s.attempts = s.attempts + 1
  s.error = 'attempt ' .. s.attempts .. ' (instance ' .. ARGV[2] .. ', token ' .. ARGV[3]
    .. ') ended without a result: its runner stopped or lost the lease'
  redis.call('HSET', KEYS[3], 'attempts', string.format('%d', s.attempts),
    'started_token', ARGV[3], 'error', s.error)
  return reply('run')
elseif op == 'done' then
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
return redis.error_reply('ERR once: unknown operation ' .. tostring(op))
