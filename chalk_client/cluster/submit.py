"""Submitting jobs: the client's scripts, command builders and reply parsers.

Submitting records a job and pushes its message in one script, so that a job
is queued or not, never half. With a separate broker the client publishes the
message itself and says so (``PUBLISHED``), or gives the record back after a
failed publish (``RELEASE``). Waiting on jobs is in ``watch``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from chalk_client.cluster import keys
from chalk_client.cluster.lanes import ENQUEUE, lane_for
from chalk_client.cluster.script import Pipeline, Script, as_text, queue_script
from chalk_client.jobs import DEFAULT_PRIORITY, Priority
from chalk_client.records import PreparedJob
from chalk_client.settings import ChalkSettings

CHUNK = 500
"""Jobs per pipeline when submitting; bounds the memory of one round trip."""

SUBMIT = Script(
    "submit",
    ENQUEUE
    + """
-- KEYS: job, result, watchers, lane (or the broker's queue), pending, push counter, blob refs
-- ARGV: id, job json, blob digest, job ttl, waiter, message (or ''),
--       retry failed ('1'/'0'), publish ('1': the caller publishes the message itself),
--       the message's task id, batch id (or ''), blob ttl, blob-ref key prefix
-- 'queued' (recorded now), 'requeued' (a failed job recorded again), 'duplicate' (already
-- recorded: this waiter is told too), 'done' (it has a result). A recorded job whose
-- publish never went through ('unpublished': that submit failed or died) is sent by
-- this caller. The first write of each branch needs memory: a full Redis refuses the
-- script whole.
local ttl = tonumber(ARGV[4])
local publishes = ARGV[8] == '1'
local digest = ARGV[3]
local function watch()
  redis.call('SADD', KEYS[3], ARGV[5])
  redis.call('EXPIRE', KEYS[3], ttl)
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'watched', '1') end
end
local function record(attempts, old_digest)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local fields = {'job', ARGV[2], 'blob', digest, 'submitted', t[1], 'submitter', ARGV[5],
                  'batch', ARGV[10], 'attempts', attempts}
  if publishes then
    fields[#fields + 1] = 'unpublished'
    fields[#fields + 1] = ARGV[5]
  else
    -- The queue is named only when it is a list of this Redis (not another broker's).
    fields[#fields + 1] = 'queue'
    fields[#fields + 1] = KEYS[4]
  end
  if ARGV[6] ~= '' then
    enqueue(KEYS[4], ARGV[6], false)
    local seq = redis.call('INCR', KEYS[6])
    for _, v in ipairs({'task', ARGV[9], 'seq', seq, 'pushed', now, 'head', '0'}) do
      fields[#fields + 1] = v
    end
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('ZADD', KEYS[5], now, ARGV[1])
  if digest ~= old_digest then
    if digest ~= '' then
      redis.call('INCR', KEYS[7])
      redis.call('EXPIRE', KEYS[7], tonumber(ARGV[11]))
    end
    if old_digest ~= '' then redis.call('DECR', ARGV[12] .. old_digest) end
  end
end
local function again(attempts, old_digest, old_submitter)
  -- A failed job scored again: its result and record go, a new record comes; whoever
  -- waited on the failed job is told of the new result too.
  redis.call('HSET', KEYS[1], 'retrying', '1')  -- a write needing memory, first
  redis.call('DEL', KEYS[2], KEYS[1])
  record(attempts, old_digest)
  if old_submitter and old_submitter ~= ARGV[5] then
    redis.call('SADD', KEYS[3], old_submitter)
    redis.call('EXPIRE', KEYS[3], ttl)
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('HSET', KEYS[1], 'watched', '1') end
  return 'requeued'
end
local rec = redis.call('HMGET', KEYS[1], 'submitter', 'unpublished', 'blob', 'attempts',
                       'status', 'owner')
if rec[1] then
  if rec[5] then  -- finished, its record kept (failed, or CHALK_KEEP_JOBS)
    if ARGV[7] == '1' and (rec[5] == 'failed' or rec[5] == 'cancelled') then
      return again(rec[4] or 0, rec[3] or '', rec[1])
    end
    watch()
    return 'done'
  end
  if rec[2] and (publishes or ARGV[6] ~= '') then
    if rec[6] and rec[6] ~= '' then
      redis.call('HDEL', KEYS[1], 'unpublished')  -- a worker started it: it was delivered
    elseif publishes then
      redis.call('HSET', KEYS[1], 'unpublished', ARGV[5])
      if rec[1] ~= ARGV[5] then watch() end
      local t = redis.call('TIME')
      redis.call('ZADD', KEYS[5], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
                 ARGV[1])
      return 'queued'
    else
      redis.call('HDEL', KEYS[1], 'unpublished')
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      enqueue(KEYS[4], ARGV[6], false)
      local seq = redis.call('INCR', KEYS[6])
      redis.call('HSET', KEYS[1], 'task', ARGV[9], 'seq', seq, 'pushed', now, 'head', '0',
                 'queue', KEYS[4])
      redis.call('ZADD', KEYS[5], now, ARGV[1])
      if rec[1] ~= ARGV[5] then watch() end
      return 'queued'
    end
  end
  if rec[1] ~= ARGV[5] then watch() end
  return 'duplicate'
end
local found = redis.call('GET', KEYS[2])
if found then
  local status = ARGV[7] == '1' and cjson.decode(found)['status']
  if status == 'failed' or status == 'cancelled' then
    return again(0, '', nil)
  end
  redis.call('SADD', KEYS[3], ARGV[5])  -- told of the result of a retry by someone else
  redis.call('EXPIRE', KEYS[3], ttl)
  return 'done'
end
record(0, '')
return 'queued'
""",
)


PUBLISHED = Script(
    "published",
    """
-- KEYS: job, pending
-- ARGV: waiter, id
-- The submit whose waiter this is published the job's message: the record is complete,
-- and the broker (not the reconciler) looks after the message from now on.
local unpublished = redis.call('HGET', KEYS[1], 'unpublished')
if unpublished == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'unpublished')
end
if unpublished == ARGV[1] or not unpublished then
  redis.call('ZREM', KEYS[2], ARGV[2])
end
return 1
""",
)


RELEASE = Script(
    "release",
    """
-- KEYS: job, result, watchers, pending
-- ARGV: waiter, id, blob-ref key prefix
-- After a failed publish: 'released' (the record this submit made is deleted, so the
-- next submit records and sends the job), 'unpublished' (another submit took the job
-- over and may have failed too: the next submit sends it) or 'queued' (a publish went
-- through, or a worker started the job: its message was delivered after all).
if redis.call('EXISTS', KEYS[2]) == 1 then return 'queued' end
local rec = redis.call('HMGET', KEYS[1], 'unpublished', 'submitter', 'owner', 'blob')
if not rec[2] then return 'released' end
if not rec[1] then return 'queued' end
if rec[3] and rec[3] ~= '' then return 'queued' end
if rec[1] == ARGV[1] and rec[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[2])
  if rec[4] and rec[4] ~= '' then redis.call('DECR', ARGV[3] .. rec[4]) end
  return 'released'
end
return 'unpublished'
""",
)


def chunks(items: Sequence[PreparedJob], size: int = CHUNK) -> Iterator[Sequence[PreparedJob]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def distinct_blobs(jobs: Sequence[PreparedJob]) -> dict[str, bytes]:
    """Each distinct submission archive of ``jobs``, by digest."""
    return {job.digest: job.archive for job in jobs if job.archive is not None}


def queue_submit(
    pipe: Pipeline,
    job: PreparedJob,
    settings: ChalkSettings,
    *,
    waiter: str,
    message: tuple[str, str] | None,
    retry_failed: bool,
    publishes: bool = False,
    batch_id: str | None = None,
    priority: Priority = DEFAULT_PRIORITY,
) -> None:
    """Queue the submit script of one job: claim the id, record, enqueue, register the waiter.

    ``message`` is the job's queue message and its task id (a Redis broker), put in
    the lane of its batch and ``priority`` (the job's own priority, if it has one).
    ``publishes``: the caller sends the message itself (a separate broker), so
    the record stays ``unpublished`` until ``queue_published`` says it went.
    """
    text, task_id = message or ("", "")
    queue_script(
        pipe,
        SUBMIT,
        [
            keys.job(job.job_id),
            keys.result(job.job_id),
            keys.watchers(job.job_id),
            lane_for(settings.queue, job.priority or priority, batch_id),
            keys.PENDING,
            keys.PUSHES,
            keys.blobref(job.digest),
        ],
        [
            job.job_id,
            job.record,
            job.digest,
            settings.job_ttl_s,
            waiter,
            text,
            "1" if retry_failed else "0",
            "1" if publishes else "0",
            task_id,
            batch_id or "",
            settings.blob_ttl_s,
            keys.BLOBREF_PREFIX,
        ],
    )


def queue_published(pipe: Pipeline, job_ids: Sequence[str], waiter: str) -> None:
    """Queue, per job, the note that this submit's publish of its message went through."""
    for job_id in job_ids:
        queue_script(pipe, PUBLISHED, [keys.job(job_id), keys.PENDING], [waiter, job_id])


def queue_release(pipe: Pipeline, job_ids: Sequence[str], waiter: str) -> None:
    """Queue, per job whose publish failed, the release of the record this submit made."""
    for job_id in job_ids:
        queue_script(
            pipe,
            RELEASE,
            [keys.job(job_id), keys.result(job_id), keys.watchers(job_id), keys.PENDING],
            [waiter, job_id, keys.BLOBREF_PREFIX],
        )


def queue_blob_refresh(pipe: Pipeline, digests: Sequence[str], settings: ChalkSettings) -> None:
    """Queue an ``EXPIRE`` per archive: a reply of 0 means it must be written again."""
    for digest in digests:
        pipe.expire(keys.blob(digest), settings.blob_ttl_s)


def queue_submit_chunk(
    pipe: Pipeline,
    chunk: Sequence[PreparedJob],
    blobs: dict[str, bytes],
    settings: ChalkSettings,
    waiter: str,
    messages: Callable[[str], tuple[str, str]] | None,
    retry_failed: bool,
    batch_id: str | None = None,
    priority: Priority = DEFAULT_PRIORITY,
) -> None:
    """Queue the archives to write (before any job naming them), then each job's submit.

    With ``messages`` (a Redis broker: each job's message and its task id) each
    script enqueues its job's message; without, the caller publishes the fresh
    jobs itself.
    """
    for digest, archive in blobs.items():
        pipe.set(keys.blob(digest), archive, ex=settings.blob_ttl_s)
    for job in chunk:
        queue_submit(
            pipe,
            job,
            settings,
            waiter=waiter,
            message=None if messages is None else messages(job.job_id),
            retry_failed=retry_failed,
            publishes=messages is None,
            batch_id=batch_id,
            priority=priority,
        )


def plan_chunks(
    jobs: Sequence[PreparedJob], blobs: dict[str, bytes], missing: set[str]
) -> Iterator[tuple[Sequence[PreparedJob], dict[str, bytes]]]:
    """Each chunk of ``jobs`` with the archives it must write first (each written once)."""
    for chunk in chunks(jobs):
        writes = {job.digest: blobs[job.digest] for job in chunk if job.digest in missing}
        missing -= writes.keys()
        yield chunk, writes


def queue_batch_index(
    pipe: Pipeline, batch_id: str, job_ids: Sequence[str], settings: ChalkSettings
) -> None:
    """Queue the batch's ordered id list and its entry among the recent batches."""
    if not job_ids:
        return
    for start in range(0, len(job_ids), CHUNK * 10):
        pipe.rpush(keys.batch(batch_id), *job_ids[start : start + CHUNK * 10])
    pipe.expire(keys.batch(batch_id), settings.result_ttl_s)
    pipe.zadd(keys.BATCHES, {batch_id: time.time()})
    pipe.zremrangebyrank(keys.BATCHES, 0, -keys.RECENT_BATCHES_KEPT - 1)


def chunk_replies(
    chunk: Sequence[PreparedJob], writes: dict[str, bytes], replies: Sequence[object]
) -> list[str | Exception]:
    """Each job's submit reply (text or error); a job whose archive could not be written
    gets that error, whatever its own reply."""
    failed = {
        digest: reply
        for digest, reply in zip(writes, replies, strict=False)
        if isinstance(reply, Exception)
    }
    return [
        failed.get(job.digest, reply if isinstance(reply, Exception) else as_text(reply))
        for job, reply in zip(chunk, replies[len(writes) :], strict=True)
    ]
