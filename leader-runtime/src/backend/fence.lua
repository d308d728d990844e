-- fence.lua: the check that opens every fenced write (record.lua prepended,
-- one fence_<op>.lua appended; the op runs only if this lets it through, in
-- the same script, so nothing can come between the check and the write).
--
-- The group's high-water mark is its record's `token`: the last fencing
-- token issued, raised by every election (acquire.lua). A write carrying a
-- token below it comes from a leader that has been succeeded: refused.
-- KEYS[1]  the group's record key (see record.lua)
-- KEYS[2…] the keys the op writes (on a cluster: in the record's hash slot)
-- ARGV[1]  the writer's token: decimal, compared as a decimal string
--          (never a Lua number: a double is exact only below 2^53)
-- ARGV[2…] the op's arguments
-- returns  {0, mark}  refused, nothing written; mark = the record's token
--          {0}        refused, nothing written: there is no record (the
--                     server lost its data), so no token can be vouched for
--                     (fail closed until the next election writes one)
--          {1, …}     applied: the op's reply follows (see fence_<op>.lua)
--          an error reply, nothing written: a malformed token or record
-- A token above the mark (the record restored from an older snapshot after
-- this token was issued) applies and raises the mark to it, so the next
-- election issues a greater one.
if not valid_token(ARGV[1]) then
  return redis.error_reply('ERR fenced write: malformed token')
end
local fence_record, fence_err = read_record(KEYS[1])
if fence_err then return redis.error_reply(fence_err) end
if not fence_record then return {0} end
if greater(fence_record.token, ARGV[1]) then return {0, fence_record.token} end
if not fence_record.legacy and greater(ARGV[1], fence_record.token) then
  redis.call('HSET', KEYS[1], 'token', ARGV[1])
end
