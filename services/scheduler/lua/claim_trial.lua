-- Takes the next trial index of a running experiment if a concurrency slot is free. The index
-- is handed out once, ever (the counter only grows), and its trial job id is recorded as
-- belonging to the experiment before the job exists, so that callbacks for it always resolve.
-- KEYS[1] experiment hash   KEYS[2] active trial set   KEYS[3] trial owner hash
-- ARGV: 1 RUNNING state number, 2 experiment id, 3 trial job id prefix (the index is appended)
-- Returns the index, or -1 when the experiment is not running, fully planned out, or full.
local f = redis.call("HMGET", KEYS[1], "state", "next", "total", "max")
if f[1] ~= ARGV[1] then
  return -1
end
local nxt, total, max = tonumber(f[2]), tonumber(f[3]), tonumber(f[4])
if nxt >= total then
  return -1
end
if max > 0 and redis.call("SCARD", KEYS[2]) >= max then
  return -1
end
redis.call("HSET", KEYS[1], "next", nxt + 1)
redis.call("SADD", KEYS[2], nxt)
redis.call("HSET", KEYS[3], ARGV[3] .. nxt, ARGV[2] .. "/" .. nxt)
return nxt
