-- Records a deployment: request_id dedupe, unique id and serving name, READY versions only.
-- KEYS[1] request key (ignored unless ARGV[6] == "1")   KEYS[2] deployment hash
-- KEYS[3] deployments time index   KEYS[4] serving names hash
-- KEYS[5 .. 4+N] the hashes of the N versions served
-- KEYS[5+N .. 4+2N] the deployments sets of the same versions
-- ARGV: 1 deployment id, 2 Deployment proto, 3 index member, 4 serving name, 5 request ttl
--       seconds, 6 "1" when a request_id was given, 7 deployment key prefix, 8 N,
--       9 READY state number, 10 tenant every version must belong to (another's is missing),
--       11 fingerprint of the request (common/idempotency.py)
-- Returns {"created"} | {"duplicate", proto of the deployment first created with the request_id,
--       that request's fingerprint ("" for a deployment stored before fingerprints)}
--       | {"exists"} | {"serving_name_taken", deployment id}
--       | {"version_missing", i} | {"version_not_ready", i, state} (i counts from 1)
if ARGV[6] == "1" then
  local existing = redis.call("GET", KEYS[1])
  if existing then
    local first = redis.call("HMGET", ARGV[7] .. existing, "proto", "request_fp")
    if first[1] then
      return {"duplicate", first[1], first[2] or ""}
    end
  end
end
if redis.call("EXISTS", KEYS[2]) == 1 then
  return {"exists"}
end
local holder = redis.call("HGET", KEYS[4], ARGV[4])
if holder then
  return {"serving_name_taken", holder}
end
local n = tonumber(ARGV[8])
for i = 1, n do
  local state, tenant = unpack(redis.call("HMGET", KEYS[4 + i], "state", "tenant"))
  if not state or (tenant or "default") ~= ARGV[10] then
    return {"version_missing", i}
  end
  if state ~= ARGV[9] then
    return {"version_not_ready", i, state}
  end
end
for i = 1, n do
  redis.call("SADD", KEYS[4 + n + i], ARGV[1])
end
redis.call("HSET", KEYS[2], "proto", ARGV[2], "gen", 1, "member", ARGV[3], "serving_name", ARGV[4])
redis.call("ZADD", KEYS[3], 0, ARGV[3])
redis.call("HSET", KEYS[4], ARGV[4], ARGV[1])
if ARGV[6] == "1" then
  redis.call("HSET", KEYS[2], "request_fp", ARGV[11])
  redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[5])
end
return {"created"}
