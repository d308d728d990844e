-- inspect: what one group's keys hold, for the admin API (`leader status`);
-- reads only.
-- KEYS[1]  lease key, KEYS[2] record key, KEYS[3] pause key (see record.lua)
-- returns  {holder, pttl, token, pause}: holder nil when nobody holds the
--          lease; pttl as PTTL; token the record's last token (nil: no
--          record); pause nil, or {by, at, reason} of the pause key
local holder = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local token = false
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind == 'hash' then
  token = redis.call('HGET', KEYS[2], 'token')
elseif kind == 'string' then
  token = redis.call('GET', KEYS[2])
end
local pause = false
if redis.call('TYPE', KEYS[3])['ok'] ~= 'none' then
  pause = redis.call('HMGET', KEYS[3], 'by', 'at', 'reason')
end
return {holder, pttl, token, pause}
