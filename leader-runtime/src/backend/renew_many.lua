-- renew_many: renew.lua for many groups of one instance in one call.
-- KEYS     lease keys (on a cluster: all in one hash slot)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns  one entry per key, in order:
--           1  renewed
--           0  the lease is gone (expired, or Redis lost its data)
--          -1  another instance (or another value) holds it
--          a string: the error of that key alone (e.g. WRONGTYPE), so one
--          bad key does not fail the renewals of the others (an error reply
--          nested in the array would fail the whole call client-side)
local out = {}
for i, key in ipairs(KEYS) do
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' and holder.err then
    out[i] = tostring(holder.err)
  elseif holder == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    out[i] = 1
  elseif holder then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
