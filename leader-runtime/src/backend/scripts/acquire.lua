-- acquire: take the lease of one group, or re-claim our own; issue a fencing token.
-- KEYS[1]  lease key   (string: holder's instance id, with PX ttl)
-- KEYS[2]  record key  (hash, no expiry: see record.lua)
-- KEYS[3]  pause key   (see record.lua)
-- KEYS[4]  server marker (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- ARGV[3], ARGV[4]  optional: the heir rule's suspect_below and grace in
--          milliseconds (record.lua's after_heir, backend/heir.rs)
-- returns  {1, token, wait, why, last}
--                                 we hold the lease now. token: a decimal
--                                 string (exact), greater than every earlier
--                                 one; last: the token issued before it (''
--                                 when there was no record), so an instance
--                                 that released the lease can tell whether
--                                 anyone held it since. Our view may begin
--                                 only `wait` ms after this reply arrived,
--                                 because an earlier holder may still
--                                 believe it leads:
--            why = 'first'      no record (first election, or Redis lost its
--                               data): wait = ttl
--                  'unvouched'  the record was written by another Redis
--                               process (restart from disk, failover,
--                               restore): wait = ttl
--                  'early'      the lease key vanished before the last
--                               holder's time (eviction, DEL): wait = until - now
--                  ''           nobody else can: wait = 0
--          {0, holder, pttl}      another instance holds it for pttl more ms
--                                 (pttl < 0: the key has no expiry)
--                                 (plus the heir rule's grace when the
--                                 holder missed a renewal and another
--                                 follower is the group's heir: record.lua)
--          {2, 'paused'}          the group is paused: nothing written (also
--                                 when we or another instance hold the lease)
-- Nothing is written when the record is malformed (an error reply).
-- The work is record.lua's acquire_one (shared with acquire_many.lua).
-- Redis < 5 needs this to write after reading TIME; later versions ignore it.
if redis.replicate_commands then redis.replicate_commands() end
marker_ttl = tonumber(ARGV[2])
local suspect_below, grace = heir_args(3)
local reply, err = acquire_one(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), ARGV[2], script_clock(),
  suspect_below, grace)
if err then return redis.error_reply(err) end
return reply
