-- Removes a deployment whose replicas are gone, and its version references.
-- KEYS[1] deployment hash   KEYS[2] deployments time index   KEYS[3] serving names hash
-- KEYS[4 ..] the deployments sets of the versions it served
-- ARGV: 1 deployment id, 2 expected gen
-- Returns {"removed"} | {"conflict"} | {"missing"}
local gen = redis.call("HGET", KEYS[1], "gen")
if not gen then
  return {"missing"}
end
if gen ~= ARGV[2] then
  return {"conflict"}
end
local member = redis.call("HGET", KEYS[1], "member")
local serving_name = redis.call("HGET", KEYS[1], "serving_name")
for i = 4, #KEYS do
  redis.call("SREM", KEYS[i], ARGV[1])
end
if redis.call("HGET", KEYS[3], serving_name) == ARGV[1] then
  redis.call("HDEL", KEYS[3], serving_name)
end
redis.call("ZREM", KEYS[2], member)
redis.call("DEL", KEYS[1])
return {"removed"}
