-- fence_del: DEL KEYS[2] (record.lua and fence.lua prepended: see fence.lua).
-- returns  {1, n} applied; n = 1 when the key existed, else 0
--          or fence.lua's refusal
return {1, redis.call('DEL', KEYS[2])}
