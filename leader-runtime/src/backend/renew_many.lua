-- renew_many: renew.lua for many groups of one instance in one call
-- (record.lua prepended).
-- KEYS     pairs: lease key, record key of each group (on a cluster: all in
--          one hash slot)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns  one entry per pair, in order: renew.lua's answer (1, 0, -1, -2),
--          or a string: the error of that group alone (e.g. WRONGTYPE), so
--          one bad key does not fail the renewals of the others (an error
--          reply nested in the array would fail the whole call client-side)
if redis.replicate_commands then redis.replicate_commands() end
local ttl = tonumber(ARGV[2])
local now = server_now()
local run = this_run()
local out = {}
for i = 1, #KEYS / 2 do
  local ok, answer = pcall(renew_one, KEYS[2 * i - 1], KEYS[2 * i], ARGV[1], now, ttl, run)
  if ok then
    out[i] = answer
  else
    out[i] = tostring(type(answer) == 'table' and answer.err or answer)
  end
end
return out
