-- Extends the leases this replica still owns; reports the ones it lost (taken over or ended).
-- KEYS[1] leases   KEYS[2..] the job hashes, in the order of the job ids in ARGV[3..]
-- ARGV: 1 owner, 2 new expiry (epoch ms), 3.. job ids
-- Returns the job ids whose lease this owner no longer holds.
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call("HGET", KEYS[i - 1], "owner") == ARGV[1] and redis.call("ZSCORE", KEYS[1], id) then
    redis.call("ZADD", KEYS[1], "XX", ARGV[2], id)
  else
    table.insert(lost, id)
  end
end
return lost
