-- Creates a job in one round trip: request_id dedupe, record, indexes, queue, first event.
-- The first event waits in the job hash (field "e1"); the events stream is created with the
-- second event, which moves it there first (claim_job.lua, update_job.lua). A Redis stream
-- preallocates its head node (stream-node-max-bytes, 4 KB), which made a queued job cost 6.5 KB.
-- KEYS[1] request key (ignored unless ARGV[13] == "1")   KEYS[2] job hash
-- KEYS[3] events stream (not written here)   KEYS[4] time index   KEYS[5] tenant index
-- KEYS[6] experiment index (ignored when ARGV[6] == "")   KEYS[7] QUEUED state set   KEYS[8] queue
-- ARGV: 1 job id, 2 Job proto, 3 index member, 4 queue score, 5 tenant, 6 experiment,
--       7 cpu_m, 8 gpu_m, 9 memory bytes (whole job), 10 first JobEvent, 11 events cap,
--       12 request ttl seconds, 13 "1" when a request_id was given, 14 job key prefix,
--       15 QUEUED state number, 16 fingerprint of the request (common/idempotency.py)
-- Returns {"created"} | {"duplicate", proto of the job first created with the request_id,
--       that request's fingerprint ("" for a job stored before fingerprints)}
--       | {"exists"} when the job id is taken. Whether a duplicate repeats the request is the
--       caller's to judge (one rule for every create, in Python).
-- A duplicate's job key (ARGV[14] .. id) is built from the id read from the request key, which
-- the caller cannot know beforehand: so it runs on single-node Redis only (a cluster needs
-- every key in KEYS).
if ARGV[13] == "1" then
  local existing = redis.call("GET", KEYS[1])
  if existing then
    local first = redis.call("HMGET", ARGV[14] .. existing, "proto", "request_fp")
    if first[1] then
      return {"duplicate", first[1], first[2] or ""}
    end
  end
end
if redis.call("EXISTS", KEYS[2]) == 1 then
  return {"exists"}
end
redis.call("HSET", KEYS[2], "id", ARGV[1], "proto", ARGV[2], "version", 1, "state", ARGV[15],
  "seq", 1, "member", ARGV[3], "score", ARGV[4], "tenant", ARGV[5], "experiment", ARGV[6],
  "cpu_m", ARGV[7], "gpu_m", ARGV[8], "mem", ARGV[9], "owner", "", "run_seq", 0,
  "stop_intent", "", "stop_reason", "", "e1", ARGV[10])
redis.call("ZADD", KEYS[4], 0, ARGV[3])
redis.call("ZADD", KEYS[5], 0, ARGV[3])
if ARGV[6] ~= "" then
  redis.call("ZADD", KEYS[6], 0, ARGV[3])
end
redis.call("SADD", KEYS[7], ARGV[1])
redis.call("ZADD", KEYS[8], ARGV[4], ARGV[1])
if ARGV[13] == "1" then
  redis.call("HSET", KEYS[2], "request_fp", ARGV[16])
  redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[12])
end
return {"created"}
