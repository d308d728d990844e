-- renew_many: renew.lua for many groups of one instance in one call
-- (record.lua prepended).
-- KEYS     triples: lease key, record key, pause key of each group (on a
--          cluster: all in one hash slot), then the server marker
--          (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- ARGV[3…] the token of the leadership each renewal extends, one per triple
--          in order (decimal)
-- returns  one entry per triple, in order: renew.lua's answer (1, 0, -1, -2, -3),
--          or a string: the error of that group alone (e.g. WRONGTYPE), so
--          one bad key does not fail the renewals of the others (an error
--          reply nested in the array would fail the whole call client-side)
if redis.replicate_commands then redis.replicate_commands() end
marker_ttl = tonumber(ARGV[2])
local ttl = tonumber(ARGV[2])
local now = server_now()
local run = this_run()
local unpaused = none_paused()
local out = {}
for i = 1, group_count() do
  local k = 3 * i - 2
  local ok, answer = pcall(renew_one, KEYS[k], KEYS[k + 1], KEYS[k + 2], ARGV[1], ARGV[2 + i], now, ttl, run,
    unpaused)
  if ok then
    out[i] = answer
  else
    out[i] = tostring(type(answer) == 'table' and answer.err or answer)
  end
end
return out
