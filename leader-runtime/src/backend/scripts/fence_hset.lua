-- fence_hset: HSET KEYS[2] ARGV[2] ARGV[3]
-- (record.lua and fence.lua prepended: see fence.lua).
-- returns  {1, n} applied; n = 1 when the field is new, 0 when it was replaced
--          or fence.lua's refusal
return {1, redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])}
