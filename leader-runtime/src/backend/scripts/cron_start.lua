-- cron_start: mark a claimed cron tick as started, right before its body
-- starts: the one moment that decides whether a claim ran. A claim whose
-- body never started is decided again by a later leadership (claim.lua);
-- one that started never is. Both sides check the lease in a script, and a
-- token that lost the lease never holds it again: a start either comes
-- before every claim of a newer token (which then sees it started) or is
-- refused.
-- KEYS[1]  lease key    (see acquire.lua)
-- KEYS[2]  record key   (see record.lua)
-- KEYS[3]  job key      (see claim.lua)
-- ARGV[1]  our instance id
-- ARGV[2]  our fencing token (decimal)
-- ARGV[3]  the tick (unix ms)
-- ARGV[4]  the claiming job object's id (decimal)
-- returns  1: started (the claim was ours, 'claimed', under our lease); 0:
--          refused (the lease or the claim is not ours, or it started
--          before): the body must not start
if redis.replicate_commands then redis.replicate_commands() end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local rec, err = read_record(KEYS[2])
if err then return redis.error_reply(err) end
if rec == nil or rec.token ~= ARGV[2] then return 0 end
local field = 'pending:' .. ARGV[3]
local v = redis.call('HGET', KEYS[3], field)
if not v then return 0 end
local pt, pc, ps, rest = string.match(v, '^(%d+) (%d+) (%a+) (.*)$')
if pt ~= ARGV[2] or pc ~= ARGV[4] or ps ~= 'claimed' then return 0 end
redis.call('HSET', KEYS[3], field, table.concat({pt, pc, 'started', rest}, ' '))
return 1
