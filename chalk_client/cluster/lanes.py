"""Lanes: where waiting messages sit, by priority and batch, so that workers take them
highest priority first and, within a priority, from the batches in turn.

Celery's model is one list per queue, first in, first out: a 200-job eval sent
behind 100,000 rollouts waits for all of them, and nothing says "this one
first". With Redis as the broker, Chalk keeps each batch's messages in a lane of
their own (``keys.lane``: one per queue, priority and batch) and, per queue and
priority, a ring of the lanes that have messages (``keys.ring``), scored by how
many messages workers took from each. A worker takes its next message with one
script (``TAKE``): from the highest priority whose ring is not empty, the head
of the least served lane, moved into the worker's held list in the same step
(so a message is never only in a worker's memory, as with ``BLMOVE`` before).
A lane that joins its ring starts level with the least served lane there: a new
batch gets its turn at once, and then shares, but cannot starve the others
while it "catches up".

The queue's own list gets one token (``TOKEN``) per message pushed into a lane:
its length is the backlog (Flower's Broker page and ``chalk status`` read it),
and an idle worker blocks on it (``BLMOVE`` into its held list), so a new job
wakes a worker at once. Tokens are hints, not the messages: a worker that finds
no token still takes from the lanes (it looks again at least every second), and
a token with no message left behind it (its batch was cancelled) costs one empty
look. A message that something else pushed straight into the queue's list
(Celery's ``send_task``) is taken as it comes, ahead of the lanes.

Everything that puts a message back (a dead consumer's given back, a lost one
sent again, an expired lease) goes through ``ENQUEUE``, into the lane the job's
record names (``queue``), at its head.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from chalk_client.cluster import keys
from chalk_client.cluster.script import Pipeline, Script, queue_script
from chalk_client.jobs import PRIORITIES, Priority


class Rank(IntEnum):
    """A priority as the lanes' keys number it: the lower, the sooner."""

    HIGH = 0
    NORMAL = 1
    LOW = 2

    @classmethod
    def of(cls, priority: Priority) -> Rank:
        """The rank of ``priority``."""
        return cls[priority.upper()]


TOKEN = "~"
"""What the queue's list holds for each message waiting in a lane."""


def priority_of(lane: str) -> Priority | None:
    """The priority of the lane ``lane`` (``None``: not a lane)."""
    if (
        lane.startswith(keys.LANE_PREFIX)
        and lane[len(keys.LANE_PREFIX) : len(keys.LANE_PREFIX) + 1].isdigit()
    ):
        rank = int(lane[len(keys.LANE_PREFIX)])
        if rank < len(Rank):
            return PRIORITIES[rank]
    return None


def lane_for(queue: str, priority: Priority, batch: str | None) -> str:
    """The lane a job of ``batch`` (``None``: sent alone) at ``priority`` waits in."""
    return keys.lane(queue, Rank.of(priority), batch or "")


ENQUEUE = (
    """
-- The ring and the queue of a lane ('chalk:lane:P:N:QUEUE:BATCH'), or nil: not a lane
-- (the queue's own list, named by records of an older client).
local function lane_parts(lane)
  local rank, n, at = string.match(lane, '^LANE_PREFIX(%d):(%d+):()')
  if not rank then return nil end
  local queue = string.sub(lane, at, at + tonumber(n) - 1)
  return 'RING_PREFIX' .. rank .. ':' .. queue, queue
end
-- Put a message in its lane, at its head (taken next: a message given back) or at its
-- tail; the lane joins its ring level with the least served lane there, and the queue
-- gets a token (a worker waiting on it wakes).
local function enqueue(lane, message, head)
  if head then redis.call('RPUSH', lane, message) else redis.call('LPUSH', lane, message) end
  local ring, queue = lane_parts(lane)
  if not ring then return end
  redis.call('LPUSH', queue, 'TOKEN')
  if not redis.call('ZSCORE', ring, lane) then
    local least = redis.call('ZRANGE', ring, 0, 0, 'WITHSCORES')
    redis.call('ZADD', ring, least[2] or 0, lane)
  end
end
""".replace("LANE_PREFIX", keys.LANE_PREFIX)
    .replace("RING_PREFIX", keys.RING_PREFIX)
    .replace("TOKEN", TOKEN)
)
"""Lua: ``enqueue(lane, message, head)``, for every script that queues a message."""


WATERMARK = Script(
    "watermark",
    """
-- KEYS: taken (watermarks)
-- ARGV: lane, push number, ... (pairs)
-- Moves each lane's watermark up to the push number of a message taken from it. An
-- emptied lane has none: an empty lane says alone that nothing waits in it.
for i = 1, #ARGV, 2 do
  if redis.call('EXISTS', ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[1], 'GT', ARGV[i + 1], ARGV[i])
  end
end
return 1
""",
)


TAKE = Script(
    "take",
    """
-- KEYS: the queue's list, the consumer's held list, taken (watermarks)
-- ARGV: '1' if the consumer's BLMOVE just moved a token into its held list, else '0';
--       the most messages to take (1 if not given)
-- The next messages for this consumer, each moved into its held list: a message pushed
-- straight into the queue's list first, else the head of the least served lane of the
-- highest priority. A lane emptied leaves its ring (and its watermark goes). Returns
-- the messages in the order taken (none: nothing waits). The first command writes
-- without needing memory: a full Redis still lets workers take (and so free) messages.
local queue, held = KEYS[1], KEYS[2]
local want = tonumber(ARGV[2] or '1')
local woken = ARGV[1] == '1'
local taken = {}

-- The next messages of the least served lane, as many as taking them one at a time
-- would take before another lane's turn (and at most room): one RPOP, one ZADD.
local function from_lanes(room)
  for rank = 0, 2 do
    local ring = 'RING_PREFIX' .. rank .. ':' .. queue
    while true do
      local least = redis.call('ZRANGE', ring, 0, 1, 'WITHSCORES')
      if #least == 0 then break end
      local lane, score = least[1], tonumber(least[2])
      local count = room
      if #least == 4 then  -- another lane's turn comes once this one's score passes its
        count = math.min(room, math.max(tonumber(least[4]) - score, 1))
      end
      local messages = redis.call('RPOP', lane, count)
      if messages then
        if redis.call('LLEN', lane) > 0 then
          redis.call('ZADD', ring, score + #messages, lane)
        else  -- its last message: the lane leaves the ring, its watermark goes
          redis.call('ZREM', ring, lane)
          redis.call('ZREM', KEYS[3], lane)
        end
        return messages
      end
      redis.call('ZREM', ring, lane)  -- emptied by hand
      redis.call('ZREM', KEYS[3], lane)
    end
  end
  return nil
end

-- Up to n messages of the lanes, in the order single takes would give them.
local function from_lanes_n(n)
  local got = {}
  while #got < n do
    local some = from_lanes(n - #got)
    if not some then break end
    for _, message in ipairs(some) do got[#got + 1] = message end
  end
  return got
end

local function hold(messages)
  if #messages == 0 then return end
  redis.call('LPUSH', held, unpack(messages))
  for _, message in ipairs(messages) do taken[#taken + 1] = message end
end

-- What single takes do, many at a time: each take pops one entry of the queue's list
-- (a message pushed straight in is taken as it is; a token, or nothing, stands for the
-- next message of the lanes) and ends the taking if the lanes have none.
if woken then  -- the token the consumer's BLMOVE moved stands for the first
  redis.call('LREM', held, 1, 'TOKEN')
  local got = from_lanes_n(1)
  hold(got)
  if #got == 0 then return taken end
end
while #taken < want do
  local room = want - #taken
  local entries = redis.call('RPOP', queue, room) or {}
  local index = 1
  while index <= #entries do
    if entries[index] ~= 'TOKEN' then
      hold({entries[index]})
      index = index + 1
    else
      local last = index
      while last < #entries and entries[last + 1] == 'TOKEN' do last = last + 1 end
      local got = from_lanes_n(last - index + 1)
      hold(got)
      if index + #got <= last then
        -- the lanes ran dry: that token is spent, the entries after it go back
        for back = #entries, index + #got + 1, -1 do
          redis.call('RPUSH', queue, entries[back])
        end
        return taken
      end
      index = last + 1
    end
  end
  if #entries < room then  -- the list ran dry: the rest come from the lanes, if any
    hold(from_lanes_n(room - #entries))
    break
  end
end
return taken
""".replace("RING_PREFIX", keys.RING_PREFIX).replace("TOKEN", TOKEN),
)

MAX_TAKE = 200
"""Most messages one ``TAKE`` moves (a worker asks for as many as it has room for)."""


def take_args(queue: str, consumer: str, *, woken: bool, count: int = 1) -> list[str]:
    """``EVALSHA`` arguments after the SHA for ``TAKE`` (``woken``: a token was moved;
    ``count``: the most messages to take, at most ``MAX_TAKE``)."""
    count = max(1, min(count, MAX_TAKE))
    return ["3", queue, keys.held(consumer), keys.TAKEN, "1" if woken else "0", str(count)]


def queue_take(pipe: Pipeline, queue: str, consumer: str, count: int = 1) -> None:
    """Queue taking the next ``count`` messages of ``queue`` into ``consumer``'s held list
    (the reply: a list of them, oldest first)."""
    count = max(1, min(count, MAX_TAKE))
    queue_script(pipe, TAKE, [queue, keys.held(consumer), keys.TAKEN], ["0", str(count)])


class ListReader(Protocol):
    """The reads of a synchronous ``redis.Redis`` that this module's looks make."""

    def zrange(self, name: str, start: int, end: int) -> Any: ...
    def lrange(self, name: str, start: int, end: int) -> Any: ...
    def pipeline(self, transaction: bool = True) -> Any: ...


@dataclass(frozen=True)
class WaitingLane:
    """A batch's jobs waiting at one priority."""

    priority: Priority
    batch: str
    """The batch (``""``: jobs sent one at a time)."""
    waiting: int


def waiting_lanes(client: ListReader, queue: str) -> list[WaitingLane]:
    """The lanes of ``queue`` with jobs waiting, highest priority first, each priority's
    in the order workers take from them (a look: workers take meanwhile)."""
    found = []
    for rank in Rank:
        head = keys.lane(queue, rank, "")
        names = [
            lane.decode() if isinstance(lane, bytes) else str(lane)
            for lane in client.zrange(keys.ring(queue, rank), 0, -1)
        ]
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.llen(name)
        for name, waiting in zip(names, pipe.execute() if names else [], strict=True):
            if waiting and name.startswith(head):
                found.append(WaitingLane(PRIORITIES[rank], name[len(head) :], int(waiting)))
    return found


def shares(lanes: list[WaitingLane]) -> dict[tuple[Priority, str], float]:
    """The share of the workers each waiting lane gets now: those of the highest priority
    with jobs waiting take turns, the others wait."""
    if not lanes:
        return {}
    top = [lane for lane in lanes if lane.priority == lanes[0].priority]
    return {(lane.priority, lane.batch): (1 / len(top) if lane in top else 0.0) for lane in lanes}


def waiting_messages(client: ListReader, queue: str) -> list[bytes]:
    """Every message waiting in ``queue``'s lanes, highest priority first, each lane from
    its head (a look, for tools and tests: workers may take them meanwhile)."""
    found: list[bytes] = []
    for rank in Rank:
        for lane in client.zrange(keys.ring(queue, rank), 0, -1):
            name = lane.decode() if isinstance(lane, bytes) else str(lane)
            found.extend(reversed(client.lrange(name, 0, -1)))
    return found
