-- Deletes a terminal job with its events and index entries; a job in any other state stays.
-- The caller read the job's tenant, experiment and state to name their keys: tenant and
-- experiment never change, and a terminal state is final, so a read that saw a terminal state
-- names the right keys; any other state read is refused below.
-- KEYS[1] job hash   KEYS[2] events stream   KEYS[3] time index   KEYS[4] tenant index
-- KEYS[5] experiment index (ignored when the job has none)   KEYS[6] set of the state read
-- ARGV: 1 the state read, 2.. terminal state numbers
-- Returns {"deleted"} | {"missing"} | {"not_terminal", state}.
local f = redis.call("HMGET", KEYS[1], "id", "state", "member", "tenant", "experiment")
if not f[1] then
  return {"missing"}
end
local terminal = false
for i = 2, #ARGV do
  if ARGV[i] == f[2] then
    terminal = true
  end
end
if not terminal or f[2] ~= ARGV[1] then
  return {"not_terminal", f[2]}
end
redis.call("DEL", KEYS[1], KEYS[2])
redis.call("ZREM", KEYS[3], f[3])
redis.call("ZREM", KEYS[4], f[3])
if f[5] ~= "" then
  redis.call("ZREM", KEYS[5], f[3])
end
redis.call("SREM", KEYS[6], f[1])
return {"deleted"}
