-- members: refresh (or leave) this instance's membership, for balanced
-- leadership, and list the live members.
-- KEYS[1]  members key (sorted set: instance id scored by when its
--          membership expires, server unix ms)
-- ARGV[1]  our instance id
-- ARGV[2]  how long our membership lasts, ms ('0': leave now)
-- ARGV[3]  a live member refreshed its membership within this many ms (the
--          fleet shares one ttl: its entry expires after now + ARGV[2] -
--          ARGV[3]); an entry not refreshed since (a crashed instance) still
--          waits for its expiry, but is not listed
-- returns  the ids of the live members
-- Redis < 5 needs this to write after reading TIME; later versions ignore it.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. (now + math.max(ttl - tonumber(ARGV[3]), 0)), '+inf')
