-- Moves waiting jobs between the queue and the parked set (keys.parked), each at its queue score
-- and only if it is still in the set it leaves and unchanged since it was read; each moved job
-- gets its new proto (the same state, a new state_reason) and a new version.
-- KEYS[1] the set they leave (queue or parked)   KEYS[2] the set they enter   KEYS[3..] job hashes
-- ARGV: for the job of KEYS[2 + i]: ARGV[2i - 1] expected version, ARGV[2i] new Job proto
-- Returns a list with 1 for each job moved, 0 for each left as it was.
local moved = {}
for i = 3, #KEYS do
  local n = i - 2
  local f = redis.call("HMGET", KEYS[i], "version", "id", "score")
  if f[1] and f[1] == ARGV[2 * n - 1] and redis.call("ZREM", KEYS[1], f[2]) == 1 then
    redis.call("ZADD", KEYS[2], f[3], f[2])
    redis.call("HSET", KEYS[i], "proto", ARGV[2 * n], "version", tonumber(f[1]) + 1)
    moved[n] = 1
  else
    moved[n] = 0
  end
end
return moved
