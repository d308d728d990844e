-- renew: extend the lease if we still hold it (record.lua prepended).
-- KEYS[1]  lease key
-- KEYS[2]  record key: its `until` follows the lease (see record.lua)
-- KEYS[3]  pause key (see record.lua)
-- KEYS[4]  server marker (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  the token of the leadership this renewal extends (decimal)
-- returns   1  renewed
--           0  the lease is gone (expired, evicted, or Redis lost its data)
--          -1  another instance (or another value) holds it, or another
--              leadership of ours (the record's token is not ARGV[3])
--          -2  the record is not vouched for (restart from disk, failover,
--              restore): nothing written; acquire again (a safe start)
--          -3  the group is paused: nothing written; hand over (drain, release)
if redis.replicate_commands then redis.replicate_commands() end
marker_ttl = tonumber(ARGV[2])
local now = server_now()
return renew_one(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[3], now, tonumber(ARGV[2]), this_run())
