"""Batch callbacks in Redis: registered at submit, claimed, recorded; read for ``chalk status``.

A batch submitted with a callback URL gets a hash ``chalk:callback:BATCH`` and an
entry in ``chalk:callbacks`` (batch -> when next due), both written in the
round trip that writes the batch's id list, before any of its jobs is pushed:
the callback exists before the last job can finish.

Every worker process looks at the due entries about once a second (``CLAIM``,
one script call). For a batch not yet finished the script moves the callback's
cursor along the batch's id list past the ids that have a result, a bounded
number per call, and looks again a second later: finishing is found
incrementally, never by reading every result again. Once the cursor reaches the
end, the script claims the callback: its entry's score moves to the end of the
claim, so no other worker sends it meanwhile, and a worker killed while sending
leaves it to another when the claim lapses. The sender then ``RECORD``s how it
went: delivered (done), failed (tried again after a backoff, until a give-up
time after the batch finished), refused (an address the operator did not
allow: never sent), or unsent (that worker has no secret: tried again later,
not counted as a try).

The worker's half (the sender thread) is ``chalk_worker.cluster.callbacks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from chalk_client.callbacks import redact_url
from chalk_client.cluster import keys
from chalk_client.cluster.script import Pipeline, Script, as_int, as_list, as_text, queue_script

RECHECK_MS = 1000
"""How long after a look at an unfinished batch its callback is due again."""
WALK_IDS = 5000
"""Ids a ``CLAIM`` call looks at, all due batches together (a few ms of Redis's time)."""
LOOK_AT = 100
"""Due callbacks a ``CLAIM`` call looks at."""


class CallbackStatus(StrEnum):
    """Where a batch's callback stands."""

    PENDING = "pending"
    """Not sent yet: the batch is unfinished, or it is about to be sent."""
    RETRYING = "retrying"
    """Tried, and the receiver failed (no 2xx): tried again after a backoff."""
    DELIVERED = "delivered"
    """The receiver answered 2xx."""
    REFUSED = "refused"
    """Not sent: the URL's address is not one ``CHALK_CALLBACK_ALLOW`` allows."""
    GIVEN_UP = "given-up"
    """Not delivered by the give-up time (``CHALK_CALLBACK_GIVE_UP_S``), or the batch expired."""


class Outcome(StrEnum):
    """What a worker's try of a callback came to, as ``RECORD`` takes it."""

    DELIVERED = "delivered"
    FAILED = "failed"
    """The receiver failed: a connection error, a timeout, or no 2xx. Counts as a try."""
    REFUSED = "refused"
    UNSENT = "unsent"
    """Not sent for want of something on this worker (its secret): tried again, not counted."""


REGISTER = Script(
    "callback-register",
    """
-- KEYS: callback hash, callbacks zset, batch list
-- ARGV: batch id, url, a fresh delivery id, ttl (s)
-- Returns {delivery id, state}. The same url again keeps the callback and its delivery id
-- (one refused or given up is armed again; one delivered stays delivered); a batch that
-- grew is looked at again. Another url is another callback, with the fresh delivery id.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[4])
local old = redis.call('HMGET', KEYS[1], 'url', 'delivery', 'state', 'cursor', 'finished')
if old[1] == ARGV[2] then
  redis.call('EXPIRE', KEYS[1], ttl)
  if old[3] == 'delivered' then return {old[2], old[3]} end
  if old[3] == 'refused' or old[3] == 'given-up' then
    redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', 0)
    redis.call('HDEL', KEYS[1], 'finished', 'claim', 'body')
    redis.call('ZADD', KEYS[2], now, ARGV[1])
    return {old[2], 'pending'}
  end
  if old[5] and tonumber(old[4] or 0) < redis.call('LLEN', KEYS[3]) then
    redis.call('HDEL', KEYS[1], 'finished', 'body')  -- more jobs: not finished after all
  end
  redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1])
  return {old[2], old[3]}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'url', ARGV[2], 'delivery', ARGV[3], 'created', t[1],
           'state', 'pending', 'cursor', 0, 'attempts', 0)
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], now, ARGV[1])
return {ARGV[3], 'pending'}
""",
)

CLAIM = Script(
    "callback-claim",
    """
-- KEYS: callbacks zset
-- ARGV: claim (ms), recheck (ms), ids to walk at most, callbacks to look at at most,
--       claimer, callback key prefix, batch key prefix, result key prefix
-- Looks at the due callbacks. An unfinished batch's cursor moves past the ids that have a
-- result; it is due again after the recheck (at once if the walk ran out of ids to look
-- at). The first finished one is claimed: due again when the claim lapses. A batch whose
-- id list expired before it finished is given up. Returns {ms until the next due entry
-- (-1: none; 0: call again now), then per callback claimed or given up: batch, 'send' or
-- 'expired', url, delivery id, finished (s), attempts, body (or '')}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local budget = tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
local claimed = false
for _, batch in ipairs(due) do
  local key = ARGV[6] .. batch
  local cb = redis.call('HMGET', key, 'url', 'delivery', 'state', 'cursor', 'finished',
                        'attempts', 'body')
  local state = cb[3]
  if not cb[1] or state == 'delivered' or state == 'refused' or state == 'given-up' then
    redis.call('ZREM', KEYS[1], batch)
  else
    local finished = cb[5]
    if not finished then
      local list = ARGV[7] .. batch
      local total = redis.call('LLEN', list)
      if total == 0 then
        redis.call('HSET', key, 'state', 'given-up', 'last_error',
                   'the batch expired (CHALK_RESULT_TTL_S) before every job had a result')
        redis.call('ZREM', KEYS[1], batch)
        for _, v in ipairs({batch, 'expired', cb[1], cb[2], '', cb[6] or '0', ''}) do
          out[#out + 1] = v
        end
      else
        local cursor = tonumber(cb[4]) or 0
        local stopped = false
        while cursor < total and budget > 0 and not stopped do
          local ids = redis.call('LRANGE', list, cursor, cursor + math.min(budget, 500) - 1)
          if #ids == 0 then break end
          for _, id in ipairs(ids) do
            if redis.call('EXISTS', ARGV[8] .. id) == 0 then
              stopped = true
              break
            end
            cursor = cursor + 1
            budget = budget - 1
          end
        end
        redis.call('HSET', key, 'cursor', cursor)
        if cursor >= total then
          finished = string.format('%.3f', now / 1000)
          redis.call('HSET', key, 'finished', finished)
        elseif stopped then
          redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), batch)
        end
      end
    end
    if finished and not claimed then
      claimed = true
      redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), batch)
      redis.call('HSET', key, 'claim', ARGV[5])
      for _, v in ipairs({batch, 'send', cb[1], cb[2], finished, cb[6] or '0', cb[7] or ''}) do
        out[#out + 1] = v
      end
    end
  end
end
local wait = -1
if claimed then
  wait = 0
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first[2] then wait = math.max(tonumber(first[2]) - now, 0) end
end
table.insert(out, 1, wait)
return out
""",
)

KEEP_BODY = Script(
    "callback-keep-body",
    """
-- KEYS: callback hash. ARGV: body
-- Keeps the first body made for the callback (every try sends the same bytes); returns it.
if redis.call('EXISTS', KEYS[1]) == 0 then return ARGV[1] end
redis.call('HSETNX', KEYS[1], 'body', ARGV[1])
return redis.call('HGET', KEYS[1], 'body')
""",
)

RECORD = Script(
    "callback-record",
    """
-- KEYS: callback hash, callbacks zset
-- ARGV: batch id, claimer, outcome, error (or ''), HTTP status (or ''), next try in (ms),
--       give up (ms after the batch finished), ttl (s), the delivery id that was tried
-- Returns the callback's state now, or 'stale' (another worker claimed it since, or the
-- batch was sent again with another URL: a new delivery id; its record stands) or 'gone'.
-- 'delivered' counts from any claimer of this delivery id; the others only from the
-- claimer.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seconds = string.format('%.3f', now / 1000)
local cb = redis.call('HMGET', KEYS[1], 'state', 'claim', 'finished', 'attempts', 'delivery')
if not cb[1] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'gone'
end
if cb[5] ~= ARGV[9] then return 'stale' end
if cb[1] == 'delivered' then return 'delivered' end
local outcome = ARGV[3]
local attempts = tonumber(cb[4]) or 0
if outcome == 'delivered' or outcome == 'failed' then attempts = attempts + 1 end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[8]))
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'status', ARGV[5]) end
if outcome == 'delivered' then
  redis.call('HSET', KEYS[1], 'state', 'delivered', 'delivered', seconds, 'attempts', attempts,
             'last_attempt', seconds)
  redis.call('HDEL', KEYS[1], 'claim')
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'delivered'
end
if cb[2] ~= ARGV[2] then return 'stale' end
redis.call('HDEL', KEYS[1], 'claim')
redis.call('HSET', KEYS[1], 'last_error', ARGV[4], 'last_attempt', seconds, 'attempts', attempts)
if outcome == 'refused' then
  redis.call('HSET', KEYS[1], 'state', 'refused')
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'refused'
end
local deadline = math.floor(tonumber(cb[3] or seconds) * 1000) + tonumber(ARGV[7])
if now >= deadline then
  redis.call('HSET', KEYS[1], 'state', 'given-up')
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'given-up'
end
local state = 'pending'
if attempts > 0 then state = 'retrying' end
redis.call('HSET', KEYS[1], 'state', state)
redis.call('ZADD', KEYS[2], math.min(now + tonumber(ARGV[6]), deadline), ARGV[1])
return state
""",
)


@dataclass(frozen=True)
class Claim:
    """A callback a ``CLAIM`` handed this worker to send (or found expired)."""

    batch_id: str
    url: str
    delivery_id: str
    finished: float
    """When the batch was found finished (Redis's clock, s); 0 for an expired one."""
    attempts: int
    """Tries so far."""
    body: bytes | None
    """The body made at an earlier try, to send again as it is."""


@dataclass(frozen=True)
class ClaimReply:
    """What a ``CLAIM`` call found: the callback to send, those given up, the next due."""

    due_in_s: float | None
    """Seconds until the next entry is due (0: look again now); ``None``: nothing pending."""
    claimed: list[Claim]
    expired: list[Claim]
    """Callbacks given up because their batch's id list expired before it finished."""


def queue_register(pipe: Pipeline, batch_id: str, url: str, delivery_id: str, ttl_s: int) -> None:
    """Queue the registration of a batch's callback (after the batch's id list is written)."""
    queue_script(
        pipe,
        REGISTER,
        [keys.callback(batch_id), keys.CALLBACKS, keys.batch(batch_id)],
        [batch_id, url, delivery_id, ttl_s],
    )


def claim_args(
    claimer: str, claim_ms: int, walk_ids: int = WALK_IDS
) -> tuple[list[str], list[str | int]]:
    """The keys and arguments of a ``CLAIM`` call by ``claimer``, walking at most ``walk_ids``."""
    return (
        [keys.CALLBACKS],
        [
            claim_ms,
            RECHECK_MS,
            walk_ids,
            LOOK_AT,
            claimer,
            keys.CALLBACK_PREFIX,
            keys.BATCH_PREFIX,
            keys.RESULT_PREFIX,
        ],
    )


def parse_claim(reply: object) -> ClaimReply:
    """Read a ``CLAIM`` reply."""
    items = as_list(reply)
    wait = as_int(items[0])
    claimed: list[Claim] = []
    expired: list[Claim] = []
    for start in range(1, len(items), 7):
        batch, kind, url, delivery, finished, attempts, body = items[start : start + 7]
        claim = Claim(
            batch_id=as_text(batch),
            url=as_text(url),
            delivery_id=as_text(delivery),
            finished=float(as_text(finished) or 0),
            attempts=as_int(attempts),
            body=(body if isinstance(body, bytes) else as_text(body).encode()) or None,
        )
        (claimed if as_text(kind) == "send" else expired).append(claim)
    return ClaimReply(None if wait < 0 else wait / 1000, claimed, expired)


def record_args(
    batch_id: str,
    claimer: str,
    outcome: Outcome,
    *,
    error: str = "",
    status: int | None = None,
    retry_in_s: float = 0.0,
    give_up_s: float,
    ttl_s: int,
    delivery_id: str,
) -> tuple[list[str], list[str | int]]:
    """The keys and arguments of a ``RECORD`` of how a try of ``batch_id``'s callback
    (its delivery ``delivery_id``) went."""
    return (
        [keys.callback(batch_id), keys.CALLBACKS],
        [
            batch_id,
            claimer,
            outcome.value,
            error[:1000],
            "" if status is None else status,
            max(int(retry_in_s * 1000), 1),
            int(give_up_s * 1000),
            ttl_s,
            delivery_id,
        ],
    )


@dataclass(frozen=True)
class CallbackState:
    """A batch's callback as Redis has it, for ``chalk status`` and ``batch_callback``."""

    batch_id: str
    url: str
    delivery_id: str
    status: CallbackStatus
    attempts: int = 0
    """Tries that reached the receiver, or failed to."""
    last_error: str | None = None
    """Why the last try failed (or why the callback was refused or given up)."""
    http_status: int | None = None
    """The receiver's last HTTP status."""
    created: float | None = None
    """When the callback was registered (s since the epoch)."""
    finished: float | None = None
    """When its batch was found finished; ``None`` while it is not."""
    delivered: float | None = None
    """When a try got a 2xx."""
    due_in_s: float | None = None
    """Seconds until the next look or try; ``None`` once it ended."""

    def describe(self) -> str:
        """One line for ``chalk status``: the state, tries, the last error, the URL."""
        where = redact_url(self.url)
        tries = f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"
        error = f"; last error: {self.last_error}" if self.last_error else ""
        if self.status is CallbackStatus.DELIVERED:
            code = f" (HTTP {self.http_status})" if self.http_status else ""
            return f"callback: delivered to {where}{code} after {tries}"
        if self.status is CallbackStatus.REFUSED:
            return f"callback: refused, not sent to {where}: {self.last_error}"
        if self.status is CallbackStatus.GIVEN_UP:
            return f"callback: given up after {tries} to {where}{error}"
        due = "" if self.due_in_s is None else f", next try in {self.due_in_s:.0f} s"
        if self.status is CallbackStatus.RETRYING:
            return f"callback: retrying {where}, {tries}{due}{error}"
        if self.finished is None:
            return f"callback: pending, sent to {where} when the batch finishes"
        return f"callback: pending, to be sent to {where}{due}{error}"


def _number(fields: dict[str, str], name: str) -> float | None:
    value = fields.get(name)
    return float(value) if value else None


STATE_FIELDS = (
    "url",
    "delivery",
    "state",
    "attempts",
    "last_error",
    "status",
    "created",
    "finished",
    "delivered",
)
"""The fields of a callback's hash that ``CallbackState`` shows (not its body)."""


def _score(reply: object) -> float:
    """A sorted set's score as redis-py replies it (a float; text from a raw client)."""
    return reply if isinstance(reply, float) else float(as_text(reply))


def _clock_ms(reply: object) -> int:
    """Redis's ``TIME`` in milliseconds, from redis-py's pair (seconds, microseconds)."""
    seconds, micros = as_list(list(reply) if isinstance(reply, tuple) else reply)
    return as_int(seconds) * 1000 + as_int(micros) // 1000


def queue_read(pipe: Pipeline, batch_id: str) -> None:
    """Queue the reads ``parse_state`` takes: the callback's fields, when it is next due,
    Redis's clock. Plain reads, not a script: a Redis user allowed only to read can run
    them, where ``EVALSHA`` needs write permission on every key it declares. Run them in
    a transaction (``MULTI``) to read one moment."""
    pipe.hmget(keys.callback(batch_id), STATE_FIELDS)
    pipe.zscore(keys.CALLBACKS, batch_id)
    pipe.time()


def parse_state(batch_id: str, replies: Sequence[object]) -> CallbackState | None:
    """The batch's callback from the replies of ``queue_read``, or ``None`` if it has none."""
    values, due, clock = replies
    found = {
        name: as_text(value)
        for name, value in zip(STATE_FIELDS, as_list(values), strict=True)
        if value is not None
    }
    if not found:
        return None
    status = found.get("status")
    return CallbackState(
        batch_id=batch_id,
        url=found.get("url", ""),
        delivery_id=found.get("delivery", ""),
        status=CallbackStatus(found.get("state", "pending")),
        attempts=int(found.get("attempts") or 0),
        last_error=found.get("last_error") or None,
        http_status=int(status) if status else None,
        created=_number(found, "created"),
        finished=_number(found, "finished"),
        delivered=_number(found, "delivered"),
        due_in_s=None if due is None else max(_score(due) - _clock_ms(clock), 0) / 1000,
    )


def claim_ms(timeout_s: float) -> int:
    """How long a worker's claim on a callback lasts: three times a step's timeout, plus 1 s."""
    return int((3 * timeout_s + 1) * 1000)
