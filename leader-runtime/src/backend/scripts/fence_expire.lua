-- fence_expire: PEXPIRE KEYS[2] ARGV[2] (milliseconds)
-- (record.lua and fence.lua prepended: see fence.lua).
-- returns  {1, n} applied; n = 1 when the key exists (and now expires), else 0
--          or fence.lua's refusal
return {1, redis.call('PEXPIRE', KEYS[2], ARGV[2])}
