-- cron_run: keep a cron run's busy mark alive, end the run and record it,
-- or give up a claim whose body did not start.
-- KEYS[1]  job key      (see claim.lua)
-- KEYS[2]  history key  (list, newest first)
-- ARGV[1]  'keep', 'done' or 'abandon'
-- ARGV[2]  "<tick> <token>" of the run
-- ARGV[3]  keep: how long the mark holds from now, ms; done: the history
--          entry; abandon: the entry recorded if the claim had started
-- ARGV[4]  done, abandon: history length kept
-- ARGV[5]  abandon: the claiming job object's id (decimal)
-- returns  keep, done: 1 when the busy mark was the run's (kept or
--          cleared), else 0; abandon: 'started' (the start went through
--          although its reply was lost: recorded, the tick stays decided),
--          'claimed' (not started: left to be decided again, see
--          claim.lua) or 'gone' (not our claim any more)
-- done removes the run's pending claim (claim.lua); abandon drops the
-- busy mark of a claim that will not run here.
if redis.replicate_commands then redis.replicate_commands() end
local ours = redis.call('HGET', KEYS[1], 'busy') == ARGV[2]
if ARGV[1] == 'keep' then
  if not ours then return 0 end
  local now = server_now()
  redis.call('HSET', KEYS[1], 'busy_until', string.format('%d', now + tonumber(ARGV[3])))
  return 1
end
local tick, token = string.match(ARGV[2], '^(%-?%d+) (%d+)$')
local field = tick and ('pending:' .. tick)
local pt, pc, ps
if field then
  local v = redis.call('HGET', KEYS[1], field)
  if v then pt, pc, ps = string.match(v, '^(%d+) (%d+) (%a+) ') end
end
if ARGV[1] == 'abandon' then
  if pt ~= token or pc ~= ARGV[5] then return 'gone' end
  if ours then redis.call('HDEL', KEYS[1], 'busy', 'busy_until') end
  if ps ~= 'started' then return 'claimed' end
  redis.call('HDEL', KEYS[1], field)
  redis.call('LPUSH', KEYS[2], ARGV[3])
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1)
  return 'started'
end
if pt == token then redis.call('HDEL', KEYS[1], field) end
if ours then redis.call('HDEL', KEYS[1], 'busy', 'busy_until') end
redis.call('LPUSH', KEYS[2], ARGV[3])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1)
if ours then return 1 end
return 0
