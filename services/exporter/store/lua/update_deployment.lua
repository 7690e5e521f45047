-- Compare-and-set change of what a deployment serves, moving its version references.
-- KEYS[1] deployment hash
-- KEYS[2 .. 1+N] the hashes of the N versions it serves after the change
-- KEYS[2+N .. 1+2N] the deployments sets of the same versions
-- KEYS[2+2N ..] the deployments sets of the versions it served before
-- ARGV: 1 expected gen, 2 Deployment proto, 3 deployment id, 4 N, 5 READY state number,
--       6 tenant every version must belong to (another's is missing)
-- Returns {"ok", new gen} | {"conflict"} | {"missing"}
--       | {"version_missing", i} | {"version_not_ready", i, state}
local gen = redis.call("HGET", KEYS[1], "gen")
if not gen then
  return {"missing"}
end
if gen ~= ARGV[1] then
  return {"conflict"}
end
local n = tonumber(ARGV[4])
for i = 1, n do
  local state, tenant = unpack(redis.call("HMGET", KEYS[1 + i], "state", "tenant"))
  if not state or (tenant or "default") ~= ARGV[6] then
    return {"version_missing", i}
  end
  if state ~= ARGV[5] then
    -- A version already served stays servable while it is READY; anything else was never READY.
    if redis.call("SISMEMBER", KEYS[1 + n + i], ARGV[3]) == 0 then
      return {"version_not_ready", i, state}
    end
  end
end
for i = 2 + 2 * n, #KEYS do
  redis.call("SREM", KEYS[i], ARGV[3])
end
for i = 1, n do
  redis.call("SADD", KEYS[1 + n + i], ARGV[3])
end
local next_gen = tonumber(gen) + 1
redis.call("HSET", KEYS[1], "proto", ARGV[2], "gen", next_gen)
return {"ok", next_gen}
