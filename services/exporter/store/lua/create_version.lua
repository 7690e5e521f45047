-- Creates a model version in EXPORTING: request_id dedupe, the model when new, the next number.
-- KEYS[1] request key (ignored unless ARGV[8] == "1")   KEYS[2] model hash
-- KEYS[3] models time index   KEYS[4] the model's versions sorted set   KEYS[5] active exports set
-- ARGV: 1 model id, 2 Model proto (written only when the model is new), 3 model index member,
--       4 ModelVersion proto (its name is derived from the number on read), 5 state number,
--       6 owner (exporter replica running the export), 7 request ttl seconds,
--       8 "1" when a request_id was given, 9 version key prefix of the model,
--       10 version changes stream key prefix of the model, 11 changes cap, 12 tenant of the
--       caller, 13 "1" when the caller may instead take an existing model's tenant (an admin
--       that named none), 14 fingerprint of the request (common/idempotency.py), kept in the
--       version's hash as request_fp when a request_id was given
-- A model's tenant is its hash's `tenant` field (absent: written before tenants, "default");
-- each version's hash gets its model's tenant.
-- Returns {"created", number, 1 if the model was created else 0, tenant}
--       | {"duplicate", "<model_id>/<number>" first created with the request_id}
--       | {"tenant_mismatch", the existing model's tenant}
if ARGV[8] == "1" then
  local existing = redis.call("GET", KEYS[1])
  if existing then
    local model_id, number = string.match(existing, "^(.*)/(%d+)$")
    if redis.call("EXISTS", ARGV[9] .. number) == 1 or model_id ~= ARGV[1] then
      return {"duplicate", existing}
    end
  end
end
local created = 0
local tenant = ARGV[12]
if redis.call("EXISTS", KEYS[2]) == 0 then
  redis.call("HSET", KEYS[2], "proto", ARGV[2], "gen", 1, "latest", 0, "member", ARGV[3], "tenant", tenant)
  redis.call("ZADD", KEYS[3], 0, ARGV[3])
  created = 1
else
  local owner = redis.call("HGET", KEYS[2], "tenant") or "default"
  if owner ~= tenant then
    if ARGV[13] ~= "1" then
      return {"tenant_mismatch", owner}
    end
    tenant = owner
  end
end
local number = redis.call("HINCRBY", KEYS[2], "latest", 1)
redis.call("HSET", ARGV[9] .. number, "proto", ARGV[4], "gen", 1, "state", ARGV[5], "owner", ARGV[6],
           "tenant", tenant)
if ARGV[8] == "1" then
  redis.call("HSET", ARGV[9] .. number, "request_fp", ARGV[14])
end
redis.call("XADD", ARGV[10] .. number, "MAXLEN", "~", ARGV[11], "*", "v", ARGV[4])
redis.call("ZADD", KEYS[4], number, number)
redis.call("SADD", KEYS[5], ARGV[1] .. "/" .. number)
if ARGV[8] == "1" then
  redis.call("SET", KEYS[1], ARGV[1] .. "/" .. number, "EX", ARGV[7])
end
return {"created", number, created, tenant}
