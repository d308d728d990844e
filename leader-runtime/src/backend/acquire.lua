-- acquire: take the lease of one group, or re-claim our own; issue a fencing token.
-- KEYS[1]  lease key   (string: holder's instance id, with PX ttl)
-- KEYS[2]  token key   (string: the last token issued for the group, no expiry)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns  {1, token, fresh}  we hold the lease now; fresh = 1 when the token key
--                             was missing (first election ever, or Redis lost its data)
--          {0, holder, pttl}  another instance holds it for pttl more ms
--                             (pttl < 0: the key has no expiry)
-- Redis < 5 needs this to write after reading TIME; later versions ignore it.
if redis.replicate_commands then redis.replicate_commands() end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0, holder, redis.call('PTTL', KEYS[1])}
end
-- A token strictly greater than every earlier one, also after a data loss:
-- the larger of "last + 1" and the server clock in microseconds.
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local last = redis.call('GET', KEYS[2])
local token = now_us
local fresh = 1
if last then
  fresh = 0
  local last_n = tonumber(last)
  if last_n == nil then
    return redis.error_reply('ERR token key holds a non-number')
  end
  token = math.max(last_n + 1, now_us)
end
redis.call('SET', KEYS[2], string.format('%d', token))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token, fresh}
