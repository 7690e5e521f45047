-- Ends a running experiment: "finish" only once every planned trial was handed out and none
-- is active (SUCCEEDED when some trial reported the metric, else FAILED); "cancel" at once.
-- KEYS[1] experiment hash   KEYS[2] active trial set   KEYS[3] best values hash
-- ARGV: 1 "finish" | "cancel", 2 end time (epoch ms), 3 reason, 4 state set key prefix,
--       5 RUNNING, 6 SUCCEEDED, 7 FAILED, 8 CANCELLED (state numbers)
-- Returns {"ended", new state} | {"not_done"} | {"not_running", state} | {"missing"}.
local f = redis.call("HMGET", KEYS[1], "id", "state", "next", "total")
if not f[1] then
  return {"missing"}
end
if f[2] ~= ARGV[5] then
  return {"not_running", f[2]}
end
local state, reason = ARGV[8], ARGV[3]
if ARGV[1] == "finish" then
  if tonumber(f[3]) < tonumber(f[4]) or redis.call("SCARD", KEYS[2]) > 0 then
    return {"not_done"}
  end
  if redis.call("HLEN", KEYS[3]) > 0 then
    state, reason = ARGV[6], "every trial ended"
  else
    state, reason = ARGV[7], "every trial ended and none reported the metric"
  end
end
redis.call("HSET", KEYS[1], "state", state, "reason", reason, "end_ms", ARGV[2])
redis.call("SMOVE", ARGV[4] .. ARGV[5], ARGV[4] .. state, f[1])
return {"ended", state}
