-- acquire: take the lease of one group, or re-claim our own; issue a fencing token.
-- KEYS[1]  lease key   (string: holder's instance id, with PX ttl)
-- KEYS[2]  record key  (hash, no expiry: see record.lua)
-- KEYS[3]  pause key   (see record.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  ttl in milliseconds
-- returns  {1, token, wait, why}  we hold the lease now. token: a decimal
--                                 string (exact), greater than every earlier
--                                 one. Our view may begin only `wait` ms
--                                 after this reply arrived, because an
--                                 earlier holder may still believe it leads:
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
--          {2, 'paused'}          the group is paused: nothing written (also
--                                 when we or another instance hold the lease)
-- Nothing is written when the record is malformed (an error reply).
-- Redis < 5 needs this to write after reading TIME; later versions ignore it.
if redis.replicate_commands then redis.replicate_commands() end
if paused(KEYS[3]) then return {2, 'paused'} end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0, holder, redis.call('PTTL', KEYS[1])}
end
local ttl = tonumber(ARGV[2])
local now, now_us = server_now()
local run = this_run()
local rec, err = read_record(KEYS[2])
if err then return redis.error_reply(err) end

local vouched = rec ~= nil and rec.run == run
local wait, why, prior = ttl, 'first', now + ttl
if rec and not vouched then
  why = 'unvouched'
elseif vouched then
  -- A re-claim waits only for the holders before us.
  local earlier = holder and rec.prior or rec['until']
  wait, why, prior = math.max(0, earlier - now), 'early', rec['until']
  if wait == 0 then why = '' end
end

-- max(last + 1, now in µs): strictly greater than every earlier token, also
-- after Redis lost the record.
local token = now_us
if rec and not greater(now_us, rec.token) then
  if rec.token == MAX_TOKEN then
    return redis.error_reply('ERR lease record ' .. KEYS[2] .. ': tokens exhausted')
  end
  token = plus_one(rec.token)
end

if rec and rec.legacy then redis.call('DEL', KEYS[2]) end
redis.call('HSET', KEYS[2], 'token', token, 'until', string.format('%d', math.max(prior, now + ttl)),
  'prior', string.format('%d', prior), 'run', run)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token, wait, why}
