-- Keeps a trial's best checkpoint as it is offered: writes when its value beats the one kept
-- (callers pass sign * metric, so larger is better). A tie keeps the older checkpoint, as
-- init_from.job and the trainer's best checkpoint (so an export) rank them: a retrain from the
-- best trial starts from the checkpoint the experiment shows.
-- Checkpoints of one trial can be offered by two replicas at once (a lease taken over).
-- KEYS[1] best-checkpoint hash: "<index>" -> serialized Checkpoint, "<index>:value" -> value
-- ARGV: 1 trial index, 2 value, 3 serialized Checkpoint
-- Returns 1 when written.
local current = redis.call("HGET", KEYS[1], ARGV[1] .. ":value")
if current and tonumber(current) >= tonumber(ARGV[2]) then
  return 0
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[3], ARGV[1] .. ":value", ARGV[2])
return 1
