-- Creates an experiment with its whole plan in one round trip: request_id dedupe, record,
-- plan, list index and state set. Nothing of the experiment exists before this runs.
-- KEYS[1] request key (ignored unless ARGV[6] == "1")   KEYS[2] experiment hash
-- KEYS[3] plan hash   KEYS[4] experiments time index   KEYS[5] RUNNING experiments set
-- ARGV: 1 experiment id, 2 Experiment proto, 3 index member, 4 total trials,
--       5 max concurrent trials (0 = no limit), 6 "1" when a request_id was given,
--       7 request ttl seconds, 8 experiment key prefix, 9 RUNNING state number,
--       10 fingerprint of the request (common/idempotency.py),
--       11.. each trial's parameters as JSON, in trial-index order (index = position - 11)
-- Returns {"created"} | {"duplicate", experiment id first created with the request_id, that
--       request's fingerprint ("" for an experiment stored before fingerprints)}
--       | {"exists"} when the experiment id is taken.
-- A duplicate's experiment key (ARGV[8] .. id) is built from the id read from the request
-- key, which the caller cannot know beforehand: so it runs on single-node Redis only.
if ARGV[6] == "1" then
  local existing = redis.call("GET", KEYS[1])
  if existing and redis.call("EXISTS", ARGV[8] .. existing) == 1 then
    return {"duplicate", existing, redis.call("HGET", ARGV[8] .. existing, "request_fp") or ""}
  end
end
if redis.call("EXISTS", KEYS[2]) == 1 then
  return {"exists"}
end
redis.call("HSET", KEYS[2], "id", ARGV[1], "proto", ARGV[2], "state", ARGV[9], "reason", "",
  "end_ms", 0, "next", 0, "total", ARGV[4], "max", ARGV[5], "member", ARGV[3])
for i = 11, #ARGV do
  redis.call("HSET", KEYS[3], i - 11, ARGV[i])
end
redis.call("ZADD", KEYS[4], 0, ARGV[3])
redis.call("SADD", KEYS[5], ARGV[1])
if ARGV[6] == "1" then
  redis.call("HSET", KEYS[2], "request_fp", ARGV[10])
  redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[7])
end
return {"created"}
