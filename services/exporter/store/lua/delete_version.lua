-- Deletes a model version unless a deployment serves it or its export is running.
-- KEYS[1] version hash   KEYS[2] the model's versions sorted set
-- KEYS[3] the version's deployments set   KEYS[4] active exports set   KEYS[5] its changes stream
-- ARGV: 1 version number, 2 active exports member "<model_id>/<number>", 3 tenant the version
--       must belong to ("" for any)
-- Returns {"deleted"} | {"missing"} | {"deployed", "<id>,<id>..."} | {"exporting"}
if redis.call("EXISTS", KEYS[1]) == 0 then
  return {"missing"}
end
if ARGV[3] ~= "" and (redis.call("HGET", KEYS[1], "tenant") or "default") ~= ARGV[3] then
  return {"missing"}
end
local deployments = redis.call("SMEMBERS", KEYS[3])
if #deployments > 0 then
  table.sort(deployments)
  return {"deployed", table.concat(deployments, ",")}
end
if redis.call("SISMEMBER", KEYS[4], ARGV[2]) == 1 then
  return {"exporting"}
end
redis.call("DEL", KEYS[1], KEYS[3], KEYS[5])
redis.call("ZREM", KEYS[2], ARGV[1])
return {"deleted"}
