-- Deletes a model and every version of it, unless one is served or still exporting.
-- KEYS[1] model hash   KEYS[2] models time index   KEYS[3] the model's versions sorted set
-- KEYS[4] active exports set
-- ARGV: 1 model id, 2 version key prefix, 3 version deployments key prefix,
--       4 version changes stream key prefix, 5 tenant the model must belong to ("" for any:
--       the model was checked, or the caller is an admin)
-- Returns {"deleted", number...} (the versions removed) | {"missing"}
--       | {"deployed", number, "<id>,<id>..."} | {"exporting", number}
local member = redis.call("HGET", KEYS[1], "member")
if not member then
  return {"missing"}
end
if ARGV[5] ~= "" and (redis.call("HGET", KEYS[1], "tenant") or "default") ~= ARGV[5] then
  return {"missing"}
end
local numbers = redis.call("ZRANGE", KEYS[3], 0, -1)
for _, number in ipairs(numbers) do
  local deployments = redis.call("SMEMBERS", ARGV[3] .. number)
  if #deployments > 0 then
    table.sort(deployments)
    return {"deployed", number, table.concat(deployments, ",")}
  end
  if redis.call("SISMEMBER", KEYS[4], ARGV[1] .. "/" .. number) == 1 then
    return {"exporting", number}
  end
end
for _, number in ipairs(numbers) do
  redis.call("DEL", ARGV[2] .. number, ARGV[3] .. number, ARGV[4] .. number)
end
redis.call("DEL", KEYS[1], KEYS[3])
redis.call("ZREM", KEYS[2], member)
local result = {"deleted"}
for _, number in ipairs(numbers) do
  table.insert(result, number)
end
return result
