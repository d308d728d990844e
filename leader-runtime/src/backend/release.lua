-- release: delete the lease if we hold it, and announce it to waiting
-- followers (record.lua prepended).
-- KEYS[1]  lease key
-- KEYS[2]  record key: a clean release lowers `until` to max(prior, now) —
--          we drained and ended our view before releasing — so the next
--          leader starts at once unless a holder before us may still lead
-- ARGV[1]  our instance id
-- ARGV[2]  release channel
-- ARGV[3]  group name
-- returns  1 released, 0 not ours (nothing done)
if redis.replicate_commands then redis.replicate_commands() end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if redis.call('TYPE', KEYS[2])['ok'] == 'hash' then
    local f = redis.call('HMGET', KEYS[2], 'prior', 'run')
    if f[2] == this_run() then
      local now = server_now()
      redis.call('HSET', KEYS[2], 'until', string.format('%d', math.max(ms(f[1]), now)))
    end
  end
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' ' .. ARGV[1])
  return 1
end
return 0
