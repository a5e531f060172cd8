//! The Lua the transitions' scripts share, as macros that expand to string
//! literals so that each script is one `concat!` of the functions it uses
//! and its own body (Redis runs a script atomically: nothing else runs
//! between its reads and its writes).

/// `live(key, now_s)`: whether the item at `key` is live. One past its TTL
/// (`expires_at < now_s`) counts as absent, whether or not Redis has
/// deleted it yet; a hash without `expires_at` was not written by this
/// library and is never replaced.
macro_rules! live_lua {
    () => {
        r#"
local function live(key, now_s)
  local expires_at = redis.call('HGET', key, 'expires_at')
  if expires_at then return tonumber(expires_at) >= now_s end
  return redis.call('EXISTS', key) == 1
end
"#
    };
}

/// `create(key, started, now_s, deleted_at_ms, fields)`: a new item (a
/// claim's STARTED one, or a FAILED one of the lock-free path) at `key`
/// unless a live one is there; `started` is the set of STARTED items.
/// Answers 1, or `{'found', item}`.
macro_rules! create_lua {
    () => {
        r#"
local function create(key, started, now_s, deleted_at_ms, fields)
  -- Invariant: one live item per key; a new item never replaces one that
  -- has not passed its TTL.
  if live(key, now_s) then
    return {'found', redis.call('HGETALL', key)}
  end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIREAT', key, deleted_at_ms)
  -- Invariant: the set of STARTED items holds every STARTED item (by its
  -- creation time) and no other written since.
  if redis.call('HGET', key, 'status') == 'STARTED' then
    redis.call('ZADD', started, redis.call('HGET', key, 'created_at'), key)
  else
    redis.call('ZREM', started, key)
  end
  return 1
end
"#
    };
}

/// `holds(key, version, owner)`: whether the lease of `version` and `owner`
/// still holds the item at `key` (the fence of every write of a lease's
/// holder).
macro_rules! holds_lua {
    () => {
        r#"
local function holds(key, version, owner)
  local found = redis.call('HMGET', key, 'status', 'version', 'owner')
  -- Invariant: only the current owner of a STARTED item writes to it; a
  -- worker taken over (new version, new owner) is fenced out, effects
  -- included.
  return found[1] == 'STARTED' and found[2] == version and found[3] == owner
end
"#
    };
}

/// `refused(change, base)` and `apply(change, base)`: a work's effects,
/// their keys at `KEYS[base + 1 ..]` (the writes', then the merged
/// increments'). A script checks every effect before it writes anything,
/// since Redis does not roll a script back: `refused` answers
/// `{'effect', i, reason}` or `{'increment', j, reason, fields}` (0-based)
/// for the first effect that may not happen, nil when all may.
macro_rules! effects_lua {
    () => {
        r#"
local EXACT = 9007199254740991
local function refused(change, base)
  for i, write in ipairs(change.writes) do
    -- Invariant: put_new never overwrites: its key must not exist.
    if write[1] == 'put_new' and redis.call('EXISTS', KEYS[base + i]) == 1 then
      return {'effect', i - 1, 'the key exists'}
    end
    if write[1] == 'add' then
      local after = tonumber(redis.call('HGET', KEYS[base + i], write[2]) or '0')
      if after == nil then
        return redis.error_reply('field ' .. write[2] .. ' of an added-to hash is not a number')
      end
      after = after + tonumber(write[3])
      -- Invariant: an add never takes its number below its floor, nor
      -- beyond 2^53 (where Lua's numbers, doubles, stop being exact).
      if (write[4] ~= '' and after < tonumber(write[4])) or math.abs(after) > EXACT then
        return {'effect', i - 1, write[2] .. ' would fall below its floor'}
      end
    end
  end
  for j, adds in ipairs(change.increments) do
    local key = KEYS[base + #change.writes + j]
    for _, add in ipairs(adds) do
      local current = tonumber(redis.call('HGET', key, add[1]) or '0')
      if current == nil then
        return redis.error_reply('field ' .. add[1] .. ' of an incremented hash is not a number')
      end
      -- Invariant: every number stays at least its floor (the value before
      -- the merged add is at least floor - by) ...
      local below = add[3] ~= '' and current < tonumber(add[3])
      -- ... and within 2^53, where Lua's numbers (doubles) are exact.
      if below or math.abs(current + tonumber(add[2])) > EXACT then
        return {'increment', j - 1, below and 'below floor' or 'out of range',
                redis.call('HGETALL', key)}
      end
    end
  end
  return nil
end
local function apply(change, base)
  for i, write in ipairs(change.writes) do
    if write[1] == 'add' then
      redis.call('HINCRBY', KEYS[base + i], write[2], write[3])
    else
      redis.call('HSET', KEYS[base + i], unpack(write[2]))
    end
  end
  for j, adds in ipairs(change.increments) do
    local key = KEYS[base + #change.writes + j]
    for _, add in ipairs(adds) do redis.call('HINCRBY', key, add[1], add[2]) end
  end
end
"#
    };
}

/// `index_unsent(key, unsent)`: the item at `key` in the set of items with
/// messages left to send (`unsent`, scored by its `updated_at`) when it
/// holds an outbox. Called by every script that writes one.
macro_rules! unsent_lua {
    () => {
        r#"
local function index_unsent(key, unsent)
  -- Invariant: the set of unsent items holds every item with an outbox;
  -- every write of an outbox adds it, atomically (the sweeper's listing).
  if redis.call('HEXISTS', key, 'outbox') == 1 then
    redis.call('ZADD', unsent, redis.call('HGET', key, 'updated_at') or '0', key)
  end
end
"#
    };
}

pub(super) use {create_lua, effects_lua, holds_lua, live_lua, unsent_lua};
