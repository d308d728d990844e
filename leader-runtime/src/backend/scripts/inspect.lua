-- inspect: what one group's keys hold, for the admin API (`leader status`);
-- reads only.
-- KEYS[1]  lease key, KEYS[2] record key, KEYS[3] pause key (see record.lua)
-- returns  {holder, pttl, token, pause}: holder nil when nobody holds the
--          lease; pttl as PTTL; token the record's last token (nil: no
--          record); pause nil, or {by, at, reason} of the pause key (a
--          key of another type: {'', '0', why})
local holder = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local token = false
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind == 'hash' then
  token = redis.call('HGET', KEYS[2], 'token')
elseif kind == 'string' then
  token = redis.call('GET', KEYS[2])
end
-- Any key at the pause name pauses (record.lua's paused()); only a hash is
-- a pause mark to read (HMGET on another type fails WRONGTYPE).
local pause = false
local pause_kind = redis.call('TYPE', KEYS[3])['ok']
if pause_kind == 'hash' then
  pause = redis.call('HMGET', KEYS[3], 'by', 'at', 'reason')
elseif pause_kind ~= 'none' then
  pause = {'', '0', 'the pause key holds a ' .. pause_kind .. ', not a pause mark'}
end
return {holder, pttl, token, pause}
