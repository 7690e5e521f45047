-- Keeps a trial's best metric value: writes only when the new value is larger (callers pass
-- sign * metric, so larger is always better). Reports of one trial can race across replicas.
-- KEYS[1] best values hash   ARGV: 1 trial index, 2 value
-- Returns 1 when written.
local current = redis.call("HGET", KEYS[1], ARGV[1])
if current and tonumber(current) >= tonumber(ARGV[2]) then
  return 0
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
return 1
