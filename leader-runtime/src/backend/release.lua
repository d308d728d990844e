-- release: delete the lease if we hold it, and announce it to waiting followers.
-- KEYS[1]  lease key
-- ARGV[1]  our instance id
-- ARGV[2]  release channel
-- ARGV[3]  group name
-- returns  1 released, 0 not ours (nothing done)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' ' .. ARGV[1])
  return 1
end
return 0
