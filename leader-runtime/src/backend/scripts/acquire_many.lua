-- acquire_many: acquire.lua for many groups of one instance in one call
-- (record.lua prepended): a follower's attempts that are due together.
-- KEYS     triples: lease key, record key, pause key of each group (on a
--          cluster: all in one hash slot), then the server marker
--          (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- ARGV[3], ARGV[4]  optional: the heir rule's suspect_below and grace in
--          milliseconds (record.lua's after_heir, backend/heir.rs)
-- returns  one flat array: for each triple, in order, acquire.lua's reply
--          spread out ({1, token, wait, why, last}: 5 entries, {0, holder,
--          pttl}: 3, {2, 'paused'}: 2, with the same meaning), or
--          {-1, message}
--          (2 entries): the error of that group alone (a malformed record,
--          WRONGTYPE), so one bad key does not fail the others (an error
--          reply nested in the array would fail the whole call client-side).
--          Flat, not one table per group: at a common expiry most attempts
--          lose, and Redis spends more time turning 500 small tables into a
--          reply than on the commands (BENCHMARKS.md).
--          Every group reads the same server time and identity.
if redis.replicate_commands then redis.replicate_commands() end
marker_ttl = tonumber(ARGV[2])
local ttl = tonumber(ARGV[2])
local id = ARGV[1]
local clock = script_clock()
local suspect_below, grace = heir_args(3)
local n = group_count()

local out, m = {}, 0
local unpaused = none_paused()
for i = 1, n do
  local k = 3 * i - 2
  -- A refused attempt, the common case at a lease's expiry, on the cheap
  -- path: the pause checked first all the same (for the whole call above,
  -- or this group's key alone), then the holder and its PTTL, nothing
  -- written; its answer is acquire_one's.
  local holder, checked = nil, false
  if unpaused or not paused(KEYS[k + 2]) then
    holder, checked = redis.pcall('GET', KEYS[k]), true
  end
  local pttl
  if type(holder) == 'string' and holder ~= id then
    -- pcall: a PTTL the ACL refuses is this group's error, not the call's
    -- (which would also have failed the groups granted before it).
    pttl = redis.pcall('PTTL', KEYS[k])
  end
  if type(pttl) == 'number' then
    out[m + 1], out[m + 2], out[m + 3] = 0, holder, after_heir(KEYS[k], id, pttl, suspect_below, grace)
    m = m + 3
  elseif pttl then
    out[m + 1], out[m + 2] = -1, tostring(pttl.err)
    m = m + 2
  else
    -- Not paused and the lease free or ours: acquire_one's grant, without
    -- its checks again. Everything else takes acquire.lua's whole path (a
    -- paused group, and a GET that failed, which fails there again as that
    -- group's error).
    local ok, reply, err
    if checked and type(holder) ~= 'table' then
      ok, reply, err = pcall(grant, KEYS[k], KEYS[k + 1], id, ttl, ARGV[2], clock, holder)
    else
      ok, reply, err = pcall(acquire_one, KEYS[k], KEYS[k + 1], KEYS[k + 2], id, ttl, ARGV[2], clock,
        suspect_below, grace)
    end
    if not ok then
      reply = {-1, tostring(type(reply) == 'table' and reply.err or reply)}
    elseif err then
      reply = {-1, err}
    end
    for j = 1, #reply do out[m + j] = reply[j] end
    m = m + #reply
  end
end
return out
