-- fence_set: SET KEYS[2] ARGV[2] (any expiry is removed, as SET does)
-- (record.lua and fence.lua prepended: see fence.lua for the check).
-- returns  {1, 1} applied, or fence.lua's refusal
redis.call('SET', KEYS[2], ARGV[2])
return {1, 1}
