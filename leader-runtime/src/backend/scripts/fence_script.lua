-- fence_script: a user's script body, run only after fence.lua let the
-- write through (record.lua and fence.lua prepended). The body sees its own
-- keys and arguments as KEYS and ARGV, without the record key and the token.
-- KEYS[2…] the user's keys (on a cluster: in the record's hash slot), then
--          the server marker (see record.lua), which the body does not see
-- ARGV[2…] the user's arguments
-- returns  {1, value} applied; value = what the body returned ({1} when nil)
--          or fence.lua's refusal
local fence_keys, fence_argv = {}, {}
for i = 2, #KEYS - 1 do fence_keys[i - 1] = KEYS[i] end
for i = 2, #ARGV do fence_argv[i - 1] = ARGV[i] end
local function fence_body(KEYS, ARGV)
--{body}
end
return {1, fence_body(fence_keys, fence_argv)}
