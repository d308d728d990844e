-- fence.lua: the check that opens every fenced write (record.lua prepended,
-- one fence_<op>.lua appended; the op runs only if this lets it through, in
-- the same script, so nothing can come between the check and the write).
--
-- The group's high-water mark is its record's `token`: the last fencing
-- token issued, raised by every election (acquire.lua). A write carrying a
-- token below it comes from a leader that has been succeeded: refused.
-- KEYS[1]  the group's record key (see record.lua)
-- KEYS[2…] the keys the op writes (on a cluster: in the record's hash slot)
-- KEYS[last] the server marker (see record.lua)
-- ARGV[1]  the writer's token: decimal, compared as a decimal string
--          (never a Lua number: a double is exact only below 2^53)
-- ARGV[2…] the op's arguments
-- returns  {0, mark}  refused, nothing written; mark = the record's token
--          {0}        refused, nothing written: there is no record (the
--                     server lost its data), or one this server does not
--                     vouch for (restarted from an older RDB or AOF file,
--                     promoted from a lagging replica, restored: a later
--                     token may have been issued and lost), so no token can
--                     be vouched for (fail closed until the next election
--                     writes one: the leader's renewal fails on that record
--                     too, and it acquires again with a safe start)
--          {1, …}     applied: the op's reply follows (see fence_<op>.lua)
--          an error reply, nothing written: a malformed token or record
-- A token above the mark of a record this server vouches for (issued where
-- the record does not show it) applies and raises the mark to it, so the
-- next election issues a greater one. On a record it does not vouch for,
-- nothing applies, not even the mark's own token: the restored mark may be
-- older than tokens issued since, so a deposed leader's token can look
-- current or newer there.
if not valid_token(ARGV[1]) then
  return redis.error_reply('ERR fenced write: malformed token')
end
local fence_record, fence_err = read_record(KEYS[1])
if fence_err then return redis.error_reply(fence_err) end
if not fence_record or not vouched(fence_record, this_run()) then return {0} end
if greater(fence_record.token, ARGV[1]) then return {0, fence_record.token} end
if greater(ARGV[1], fence_record.token) then
  redis.call('HSET', KEYS[1], 'token', ARGV[1])
end
