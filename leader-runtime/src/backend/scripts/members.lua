-- members: refresh (or leave) this instance's membership, for balanced
-- leadership, and list the live members with what they published.
-- KEYS[1]  members key (hash: instance id -> '<expiry> <leading> <campaigns>':
--          when its membership expires, server unix ms; how many groups it
--          leads; how many it campaigns in). One key: one hash slot.
-- ARGV[1]  our instance id
-- ARGV[2]  how long our membership lasts, ms ('0': leave now)
-- ARGV[3]  a live member refreshed its membership within this many ms (the
--          fleet shares one ttl: its entry expires after now + ARGV[2] -
--          ARGV[3]); an entry not refreshed since (a crashed instance) still
--          waits for its expiry, but is not listed; nor is an entry that
--          expires after now + ARGV[2] + ARGV[3]
-- ARGV[4]  how many groups we lead (ignored when leaving)
-- ARGV[5]  how many groups we campaign in (ignored when leaving)
-- returns  a flat list: id, leading, campaigns of each live member
-- Redis < 5 needs this to write after reading TIME; later versions ignore it.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d %d %d', now + ttl, tonumber(ARGV[4]), tonumber(ARGV[5])))
end
local live_after = now + math.max(ttl - tonumber(ARGV[3]), 0)
-- The fleet shares one ttl: no live member's entry expires after ours (the
-- ARGV[3] of slack: a server clock stepped back a little, as after a
-- failover, drops no live member). One that does (written by hand or by
-- another deployment on this prefix, a number beyond any clock) is not
-- listed: it would count for ever as a member that never takes a group.
-- Not deleted: a member whose ttl is wrongly larger keeps its entry (it
-- lists itself; the others do not).
local live_until = now + ttl + tonumber(ARGV[3])
local entries = redis.call('HGETALL', KEYS[1])
local live = {}
for i = 1, #entries, 2 do
  -- Fields after the first three are a later version's: ignored.
  local expiry, leading, campaigns = string.match(entries[i + 1], '^(%d+) (%d+) (%d+)')
  if not expiry or tonumber(expiry) <= now then
    -- Expired (or not an entry at all): gone, as a sorted set's would be.
    redis.call('HDEL', KEYS[1], entries[i])
  elseif tonumber(expiry) > live_after and tonumber(expiry) <= live_until then
    live[#live + 1] = entries[i]
    live[#live + 1] = leading
    live[#live + 1] = campaigns
  end
end
return live
