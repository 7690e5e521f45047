-- Claims a waiting job for dispatch: it must still be queued and unchanged, the cluster must
-- have room for all its workers beyond what STARTING/RUNNING jobs already hold, and its tenant
-- must be under its limits. Then, atomically: reserve, take a lease, leave the queue, and
-- write the job as STARTING. Two replicas can never both claim one job.
-- KEYS[1] job hash   KEYS[2] events stream   KEYS[3] old state set   KEYS[4] STARTING set
-- KEYS[5] queue   KEYS[6] leases   KEYS[7] reserved   KEYS[8] tenant usage
-- ARGV: 1 expected version, 2 Job proto (STARTING), 3 STARTING state number, 4 owner,
--       5 lease expiry (epoch ms), 6 cpu_m capacity, 7 gpu_m capacity, 8 memory capacity,
--       9 tenant job limit (-1 none), 10 tenant gpu_m limit (-1 none), 11 events cap,
--       12 the state-change JobEvent
-- Returns {"ok", new version, sequence} | {"conflict"} | {"no_room", dimension}
--       | {"tenant_limit", what}.
local f = redis.call("HMGET", KEYS[1], "version", "id", "seq", "cpu_m", "gpu_m", "mem")
if not f[1] or f[1] ~= ARGV[1] then
  return {"conflict"}
end
local id = f[2]
if not redis.call("ZSCORE", KEYS[5], id) then
  return {"conflict"}
end
local cpu, gpu, mem = tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
local r = redis.call("HMGET", KEYS[7], "cpu_m", "gpu_m", "mem")
if cpu > 0 and (tonumber(r[1]) or 0) + cpu > tonumber(ARGV[6]) then
  return {"no_room", "cpu"}
end
if gpu > 0 and (tonumber(r[2]) or 0) + gpu > tonumber(ARGV[7]) then
  return {"no_room", "gpu"}
end
if mem > 0 and (tonumber(r[3]) or 0) + mem > tonumber(ARGV[8]) then
  return {"no_room", "memory"}
end
local t = redis.call("HMGET", KEYS[8], "jobs", "gpu_m")
if tonumber(ARGV[9]) >= 0 and (tonumber(t[1]) or 0) + 1 > tonumber(ARGV[9]) then
  return {"tenant_limit", "jobs"}
end
if tonumber(ARGV[10]) >= 0 and gpu > 0 and (tonumber(t[2]) or 0) + gpu > tonumber(ARGV[10]) then
  return {"tenant_limit", "gpus"}
end
local version = tonumber(f[1]) + 1
local seq = tonumber(f[3]) + 1
redis.call("HSET", KEYS[1], "proto", ARGV[2], "version", version, "state", ARGV[3], "owner", ARGV[4],
  "seq", seq, "run_seq", 0)
redis.call("SREM", KEYS[3], id)
redis.call("SADD", KEYS[4], id)
redis.call("ZREM", KEYS[5], id)
redis.call("ZADD", KEYS[6], ARGV[5], id)
redis.call("HINCRBY", KEYS[7], "cpu_m", cpu)
redis.call("HINCRBY", KEYS[7], "gpu_m", gpu)
redis.call("HINCRBY", KEYS[7], "mem", mem)
redis.call("HINCRBY", KEYS[8], "jobs", 1)
redis.call("HINCRBY", KEYS[8], "gpu_m", gpu)
-- The first event moves from the hash into the stream before the stream's first append.
local first = redis.call("HGET", KEYS[1], "e1")
if first then
  redis.call("XADD", KEYS[2], "MAXLEN", ARGV[11], "1-1", "e", first)
  redis.call("HDEL", KEYS[1], "e1")
end
redis.call("XADD", KEYS[2], "MAXLEN", ARGV[11], seq .. "-1", "e", ARGV[12])
return {"ok", version, seq}
