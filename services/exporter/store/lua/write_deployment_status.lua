-- The reconciler's write of a deployment's observed status: never its spec (proto, gen).
-- KEYS[1] deployment hash
-- ARGV: 1 the spec generation observed, 2 status (a Deployment proto holding only state,
--       state_reason and version_statuses), 3 the spec generation applied to Serve ("" keeps it,
--       "0": none)
-- Returns {"ok"} | {"missing"} (deleted meanwhile: nothing is written, the hash is not made
--       again) | {"stale"} (a status of a later generation is stored, or the generation is
--       newer than the spec: nothing is written)
local gen = redis.call("HGET", KEYS[1], "gen")
if not gen then
  return {"missing"}
end
local observed = tonumber(ARGV[1])
local stored = tonumber(redis.call("HGET", KEYS[1], "observed_gen") or "0")
if observed < stored or observed > tonumber(gen) then
  return {"stale"}
end
redis.call("HSET", KEYS[1], "status", ARGV[2], "observed_gen", observed)
if ARGV[3] ~= "" then
  redis.call("HSET", KEYS[1], "applied_gen", ARGV[3])
end
return {"ok"}
