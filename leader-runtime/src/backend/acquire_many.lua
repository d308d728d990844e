-- acquire_many: acquire.lua for many groups of one instance in one call
-- (record.lua prepended): a follower's attempts that are due together.
-- KEYS     triples: lease key, record key, pause key of each group (on a
--          cluster: all in one hash slot)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns  one entry per triple, in order: acquire.lua's reply ({1, token,
--          wait, why}, {0, holder, pttl} or {2, 'paused'}, with the same
--          meaning), or a
--          string: the error of that group alone (a malformed record,
--          WRONGTYPE), so one bad key does not fail the others (an error
--          reply nested in the array would fail the whole call client-side).
--          Every group reads the same server time and identity.
if redis.replicate_commands then redis.replicate_commands() end
local ttl = tonumber(ARGV[2])
local clock = script_clock()
local out = {}
for i = 1, #KEYS / 3 do
  local k = 3 * i - 2
  local ok, reply, err = pcall(acquire_one, KEYS[k], KEYS[k + 1], KEYS[k + 2], ARGV[1], ttl, ARGV[2], clock)
  if not ok then
    out[i] = tostring(type(reply) == 'table' and reply.err or reply)
  elseif err then
    out[i] = err
  else
    out[i] = reply
  end
end
return out
