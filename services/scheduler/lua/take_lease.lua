-- Takes over the lease of a dispatched job whose owner stopped renewing it (crashed replica).
-- KEYS[1] leases   KEYS[2] job hash
-- ARGV: 1 job id, 2 new owner, 3 now (epoch ms), 4 new expiry (epoch ms)
-- Returns 1 when taken, 0 when the lease is live or gone.
local expiry = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) > tonumber(ARGV[3]) then
  return 0
end
redis.call("HSET", KEYS[2], "owner", ARGV[2])
redis.call("ZADD", KEYS[1], ARGV[4], ARGV[1])
return 1
