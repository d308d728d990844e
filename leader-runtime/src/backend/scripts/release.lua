-- release: delete the lease if we hold it under the leadership we end, and
-- announce it to waiting followers (record.lua prepended).
-- KEYS[1]  lease key
-- KEYS[2]  record key: a clean release lowers `until` to max(prior, now) —
--          we drained and ended our view before releasing — so the next
--          leader starts at once unless a holder before us may still lead
-- KEYS[3]  server marker (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  release channel
-- ARGV[3]  group name
-- ARGV[4]  the token of the leadership we end: a release that arrives after
--          our own next acquisition (delayed on an old connection) must not
--          end the newer one
-- returns  1 released, 0 not ours (nothing done)
if redis.replicate_commands then redis.replicate_commands() end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('TYPE', KEYS[2])['ok'] ~= 'hash' then return 0 end
local f = redis.call('HMGET', KEYS[2], 'token', 'prior', 'run')
if f[1] ~= ARGV[4] then return 0 end
redis.call('DEL', KEYS[1])
if f[3] == this_run() then
  local now = server_now()
  redis.call('HSET', KEYS[2], 'until', string.format('%d', math.max(ms(f[2]), now)))
end
redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' ' .. ARGV[1])
return 1
