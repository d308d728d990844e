-- pause: pause a group fleet-wide, or end its pause (the admin API: `leader
-- pause` / `leader resume`), and announce it on the control channel.
-- KEYS[1]  pause key (see record.lua): a hash, no expiry
-- ARGV[1]  'pause' or 'resume'
-- ARGV[2]  control channel
-- ARGV[3]  the control message (see names.rs)
-- ARGV[4…] pause: who paused, when (unix ms), why ('' for no reason)
-- returns  1 when it changed (newly paused / was paused), else 0; the
--          message is published either way (a repeated request re-sends it)
local existed = redis.call('DEL', KEYS[1])
if ARGV[1] == 'pause' then
  redis.call('HSET', KEYS[1], 'by', ARGV[4], 'at', ARGV[5], 'reason', ARGV[6])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1 - existed
end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return existed
