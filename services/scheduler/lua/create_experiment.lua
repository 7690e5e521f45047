-- Creates an experiment with its whole plan in one round trip: request_id dedupe, record,
-- plan, list index and state set. Nothing else about the experiment exists before this.
-- KEYS[1] request key (ignored unless ARGV[7] == "1")   KEYS[2] experiment hash
-- KEYS[3] plan   KEYS[4] experiments time index   KEYS[5] RUNNING experiments set
-- ARGV: 1 experiment id, 2 Experiment proto, 3 plan (JSON list), 4 index member,
--       5 total trials, 6 max concurrent trials (0 = no limit), 7 "1" when a request_id was
--       given, 8 request ttl seconds, 9 experiment key prefix, 10 RUNNING state number
-- Returns {"created"} | {"duplicate", experiment id first created with the request_id}
--       | {"exists"} when the experiment id is taken.
if ARGV[7] == "1" then
  local existing = redis.call("GET", KEYS[1])
  if existing and redis.call("EXISTS", ARGV[9] .. existing) == 1 then
    return {"duplicate", existing}
  end
end
if redis.call("EXISTS", KEYS[2]) == 1 then
  return {"exists"}
end
redis.call("HSET", KEYS[2], "id", ARGV[1], "proto", ARGV[2], "state", ARGV[10], "reason", "",
  "end_ms", 0, "next", 0, "total", ARGV[5], "max", ARGV[6], "member", ARGV[4])
redis.call("SET", KEYS[3], ARGV[3])
redis.call("ZADD", KEYS[4], 0, ARGV[4])
redis.call("SADD", KEYS[5], ARGV[1])
if ARGV[7] == "1" then
  redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[8])
end
return {"created"}
