-- cron_run: keep a cron run's busy mark alive, or end the run and record it.
-- KEYS[1]  job key      (see claim.lua)
-- KEYS[2]  history key  (list, newest first)
-- ARGV[1]  'keep' or 'done'
-- ARGV[2]  "<tick> <token>" of the run
-- ARGV[3]  keep: how long the mark holds from now, ms; done: the history entry
-- ARGV[4]  done: history length kept
-- returns  1 when the busy mark was the run's (kept or cleared), else 0
if redis.replicate_commands then redis.replicate_commands() end
local ours = redis.call('HGET', KEYS[1], 'busy') == ARGV[2]
if ARGV[1] == 'keep' then
  if not ours then return 0 end
  local now = server_now()
  redis.call('HSET', KEYS[1], 'busy_until', string.format('%d', now + tonumber(ARGV[3])))
  return 1
end
if ours then redis.call('HDEL', KEYS[1], 'busy', 'busy_until') end
redis.call('LPUSH', KEYS[2], ARGV[3])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1)
if ours then return 1 end
return 0
