-- Moves RETRYING jobs whose backoff ended back into the queue, at their original score.
-- KEYS[1] delayed   KEYS[2] queue
-- ARGV: 1 now (epoch ms), 2 job key prefix
-- Returns the number of jobs moved.
-- It builds job keys (ARGV[2] .. id) for ids it reads from the delayed set, which no caller
-- can know beforehand: so it runs on single-node Redis only (a cluster needs every key in KEYS).
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1])
for _, id in ipairs(due) do
  local score = redis.call("HGET", ARGV[2] .. id, "score")
  if score then
    redis.call("ZADD", KEYS[2], score, id)
  end
  redis.call("ZREM", KEYS[1], id)
end
return #due
