-- Deletes a terminal job with its events and index entries; a job in any other state stays.
-- KEYS[1] job hash   KEYS[2] events stream   KEYS[3] time index
-- ARGV: 1 index key prefix (tenant and experiment indexes are reached through the record),
--       2 state key prefix, 3.. terminal state numbers
-- Returns {"deleted"} | {"missing"} | {"not_terminal", state}.
local f = redis.call("HMGET", KEYS[1], "id", "state", "member", "tenant", "experiment")
if not f[1] then
  return {"missing"}
end
local terminal = false
for i = 3, #ARGV do
  if ARGV[i] == f[2] then
    terminal = true
  end
end
if not terminal then
  return {"not_terminal", f[2]}
end
redis.call("DEL", KEYS[1], KEYS[2])
redis.call("ZREM", KEYS[3], f[3])
redis.call("ZREM", ARGV[1] .. "tenant:" .. f[4], f[3])
if f[5] ~= "" then
  redis.call("ZREM", ARGV[1] .. "experiment:" .. f[5], f[3])
end
redis.call("SREM", ARGV[2] .. f[2], f[1])
return {"deleted"}
