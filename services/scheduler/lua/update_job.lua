-- Compare-and-set of a job record: writes only if nobody changed the job since it was read
-- (its version), so a state transition checked in Python against the state it read is atomic.
-- KEYS[1] job hash   KEYS[2] events stream   KEYS[3] old state set   KEYS[4] new state set
-- KEYS[5] queue   KEYS[6] delayed   KEYS[7] leases   KEYS[8] reserved   KEYS[9] tenant usage
-- KEYS[10] parked
-- ARGV: 1 expected version, 2 required owner ("" = any), 3 Job proto, 4 new state number,
--       5 events cap, 6 n = number of events, 7..6+n JobEvent protos,
--       then (op, value) pairs:
--         "set", "field=value"   HSET one more hash field (split at the first "=")
--         "dequeue", ""          leave the queue, the parked set and the delayed set
--         "delay", due_ms        wait in the delayed set until due_ms (RETRYING)
--         "release", ""          give back the job's reserved resources and its lease
-- Returns {"ok", new version, last sequence} | {"conflict"} | {"lost"} (owner differs)
--       | {"missing"}.
local fields = redis.call("HMGET", KEYS[1], "version", "owner", "id", "seq", "cpu_m", "gpu_m", "mem")
if not fields[1] then
  return {"missing"}
end
if fields[1] ~= ARGV[1] then
  return {"conflict"}
end
if ARGV[2] ~= "" and fields[2] ~= ARGV[2] then
  return {"lost"}
end
local id = fields[3]
local version = tonumber(fields[1]) + 1
local seq = tonumber(fields[4])
redis.call("HSET", KEYS[1], "proto", ARGV[3], "version", version, "state", ARGV[4])
if KEYS[3] ~= KEYS[4] then
  redis.call("SREM", KEYS[3], id)
  redis.call("SADD", KEYS[4], id)
end
local n = tonumber(ARGV[6])
if n > 0 then
  -- The first event moves from the hash into the stream before the stream's first append.
  local first = redis.call("HGET", KEYS[1], "e1")
  if first then
    redis.call("XADD", KEYS[2], "MAXLEN", ARGV[5], "1-1", "e", first)
    redis.call("HDEL", KEYS[1], "e1")
  end
end
for i = 1, n do
  seq = seq + 1
  redis.call("XADD", KEYS[2], "MAXLEN", ARGV[5], seq .. "-1", "e", ARGV[6 + i])
end
redis.call("HSET", KEYS[1], "seq", seq)
local i = 7 + n
while i < #ARGV do
  local op, value = ARGV[i], ARGV[i + 1]
  if op == "set" then
    local eq = string.find(value, "=", 1, true)
    redis.call("HSET", KEYS[1], string.sub(value, 1, eq - 1), string.sub(value, eq + 1))
  elseif op == "dequeue" then
    redis.call("ZREM", KEYS[5], id)
    redis.call("ZREM", KEYS[6], id)
    redis.call("ZREM", KEYS[10], id)
  elseif op == "delay" then
    redis.call("ZREM", KEYS[5], id)
    redis.call("ZREM", KEYS[10], id)
    redis.call("ZADD", KEYS[6], value, id)
  elseif op == "release" then
    redis.call("HINCRBY", KEYS[8], "cpu_m", 0 - tonumber(fields[5]))
    redis.call("HINCRBY", KEYS[8], "gpu_m", 0 - tonumber(fields[6]))
    redis.call("HINCRBY", KEYS[8], "mem", 0 - tonumber(fields[7]))
    redis.call("HINCRBY", KEYS[9], "jobs", -1)
    redis.call("HINCRBY", KEYS[9], "gpu_m", 0 - tonumber(fields[6]))
    redis.call("ZREM", KEYS[7], id)
    redis.call("HSET", KEYS[1], "owner", "")
  end
  i = i + 2
end
return {"ok", version, seq}
