-- fence_incr: INCRBY KEYS[2] ARGV[2] (record.lua and fence.lua prepended:
-- see fence.lua).
-- returns  {1, value} applied; value = the new value as a decimal string,
--          read back with GET (INCRBY's reply becomes a Lua number, exact
--          only below 2^53)
--          or fence.lua's refusal
redis.call('INCRBY', KEYS[2], ARGV[2])
return {1, redis.call('GET', KEYS[2])}
