-- renew: extend the lease if we still hold it (record.lua prepended).
-- KEYS[1]  lease key
-- KEYS[2]  record key: its `until` follows the lease (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns   1  renewed
--           0  the lease is gone (expired, evicted, or Redis lost its data)
--          -1  another instance (or another value) holds it
if redis.replicate_commands then redis.replicate_commands() end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local now = server_now()
  extend_record(KEYS[2], now, tonumber(ARGV[2]), this_run())
  return 1
end
if holder then
  return -1
end
return 0
