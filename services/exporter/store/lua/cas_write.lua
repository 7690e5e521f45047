-- Compare-and-set write of fields of one record hash (a model or a deployment).
-- KEYS[1] the hash
-- ARGV: 1 expected gen, then field, value pairs
-- Returns {"ok", new gen} | {"conflict"} | {"missing"}
local gen = redis.call("HGET", KEYS[1], "gen")
if not gen then
  return {"missing"}
end
if gen ~= ARGV[1] then
  return {"conflict"}
end
local next_gen = tonumber(gen) + 1
redis.call("HSET", KEYS[1], "gen", next_gen)
for i = 2, #ARGV, 2 do
  redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
end
return {"ok", next_gen}
