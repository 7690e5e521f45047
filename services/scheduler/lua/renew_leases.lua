-- Extends the leases this replica still owns; reports the ones it lost (taken over or ended).
-- KEYS[1] leases
-- ARGV: 1 owner, 2 new expiry (epoch ms), 3 job key prefix, 4.. job ids
-- Returns the job ids whose lease this owner no longer holds.
local lost = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if redis.call("HGET", ARGV[3] .. id, "owner") == ARGV[1] and redis.call("ZSCORE", KEYS[1], id) then
    redis.call("ZADD", KEYS[1], "XX", ARGV[2], id)
  else
    table.insert(lost, id)
  end
end
return lost
