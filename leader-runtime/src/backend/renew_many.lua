-- renew_many: renew.lua for many groups of one instance in one call
-- (record.lua prepended).
-- KEYS     pairs: lease key, record key of each group (on a cluster: all in
--          one hash slot)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns  one entry per pair, in order:
--           1  renewed
--           0  the lease is gone (expired, evicted, or Redis lost its data)
--          -1  another instance (or another value) holds it
--          a string: the error of that group alone (e.g. WRONGTYPE), so one
--          bad key does not fail the renewals of the others (an error reply
--          nested in the array would fail the whole call client-side)
if redis.replicate_commands then redis.replicate_commands() end
local ttl = tonumber(ARGV[2])
local now = server_now()
local run = this_run()
local out = {}
for i = 1, #KEYS / 2 do
  local lease, record = KEYS[2 * i - 1], KEYS[2 * i]
  local holder = redis.pcall('GET', lease)
  if type(holder) == 'table' and holder.err then
    out[i] = tostring(holder.err)
  elseif holder == ARGV[1] then
    redis.call('PEXPIRE', lease, ARGV[2])
    extend_record(record, now, ttl, run)
    out[i] = 1
  elseif holder then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
