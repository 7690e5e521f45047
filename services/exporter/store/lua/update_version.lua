-- Compare-and-set write of a model version (state changes of its export).
-- KEYS[1] version hash   KEYS[2] active exports set   KEYS[3] the version's changes stream
-- ARGV: 1 expected gen, 2 ModelVersion proto, 3 state number, 4 "1" when the state is terminal,
--       5 active exports member "<model_id>/<number>", 6 changes cap
-- Returns {"ok", new gen} | {"conflict"} | {"missing"}
local gen = redis.call("HGET", KEYS[1], "gen")
if not gen then
  return {"missing"}
end
if gen ~= ARGV[1] then
  return {"conflict"}
end
local next_gen = tonumber(gen) + 1
redis.call("HSET", KEYS[1], "proto", ARGV[2], "gen", next_gen, "state", ARGV[3])
redis.call("XADD", KEYS[3], "MAXLEN", "~", ARGV[6], "*", "v", ARGV[2])
if ARGV[4] == "1" then
  redis.call("HSET", KEYS[1], "owner", "")
  redis.call("SREM", KEYS[2], ARGV[5])
end
return {"ok", next_gen}
