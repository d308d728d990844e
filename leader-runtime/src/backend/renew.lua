-- renew: extend the lease if we still hold it.
-- KEYS[1]  lease key
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns   1  renewed
--           0  the lease is gone (expired, or Redis lost its data)
--          -1  another instance (or another value) holds it
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then
  return -1
end
return 0
