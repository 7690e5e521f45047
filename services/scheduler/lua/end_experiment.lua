-- Ends a running experiment: "finish" only once every planned trial was handed out and none
-- is active (SUCCEEDED when some trial reported the metric, else FAILED); "cancel" at once.
-- KEYS[1] experiment hash   KEYS[2] active trial set   KEYS[3] best values hash
-- KEYS[4..7] the experiment state sets of RUNNING, SUCCEEDED, FAILED, CANCELLED
-- ARGV: 1 "finish" | "cancel", 2 end time (epoch ms), 3 reason,
--       4 RUNNING, 5 SUCCEEDED, 6 FAILED, 7 CANCELLED (state numbers, in the order of KEYS[4..7])
-- Returns {"ended", new state} | {"not_done"} | {"not_running", state} | {"missing"}.
local f = redis.call("HMGET", KEYS[1], "id", "state", "next", "total")
if not f[1] then
  return {"missing"}
end
if f[2] ~= ARGV[4] then
  return {"not_running", f[2]}
end
local ended, reason = 7, ARGV[3]
if ARGV[1] == "finish" then
  if tonumber(f[3]) < tonumber(f[4]) or redis.call("SCARD", KEYS[2]) > 0 then
    return {"not_done"}
  end
  if redis.call("HLEN", KEYS[3]) > 0 then
    ended, reason = 5, "every trial ended"
  else
    ended, reason = 6, "every trial ended and none reported the metric"
  end
end
redis.call("HSET", KEYS[1], "state", ARGV[ended], "reason", reason, "end_ms", ARGV[2])
redis.call("SMOVE", KEYS[4], KEYS[ended], f[1])
return {"ended", ARGV[ended]}
