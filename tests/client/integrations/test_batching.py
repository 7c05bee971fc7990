"""``SampleBatcher``: concurrent calls on one event loop, scored as one batch each."""

from __future__ import annotations

import asyncio
import threading

import pytest

from chalk_client.integrations.batching import SampleBatcher
from chalk_client.integrations.samples import Sample
from chalk_client.jobs import JobResult, JobStatus


class Recorder:
    """A ``score_batch`` that answers each sample with its completion as the job id."""

    def __init__(self, delay_s: float = 0.0, fail: Exception | None = None) -> None:
        self.batches: list[list[Sample]] = []
        self.delay_s = delay_s
        self.fail = fail

    async def __call__(self, samples: list[Sample]) -> list[JobResult]:
        self.batches.append(samples)
        await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        return [JobResult(job_id=str(s.completion), status=JobStatus.SUCCEEDED) for s in samples]


def sample(text: str) -> Sample:
    return Sample(completion=text)


def test_calls_awaited_together_are_one_batch_and_each_gets_its_own_result():
    recorder = Recorder()
    batcher = SampleBatcher(recorder)

    async def many() -> list[JobResult]:
        return list(await asyncio.gather(*(batcher.score(sample(f"s{n}")) for n in range(50))))

    results = asyncio.run(many())
    assert [r.job_id for r in results] == [f"s{n}" for n in range(50)]
    assert [len(b) for b in recorder.batches] == [50]
    # Re-indexed in their batch: the job ids made from the index never collide.
    assert [s.index for s in recorder.batches[0]] == list(range(50))


def test_calls_that_trickle_in_within_the_window_join_the_same_batch():
    recorder = Recorder()
    batcher = SampleBatcher(recorder, window_s=0.05, max_wait_s=1.0)

    async def trickle() -> None:
        calls = []
        for n in range(5):
            calls.append(asyncio.ensure_future(batcher.score(sample(f"s{n}"))))
            await asyncio.sleep(0.005)
        await asyncio.gather(*calls)

    asyncio.run(trickle())
    assert [len(b) for b in recorder.batches] == [5]


def test_calls_apart_go_in_batches_of_their_own():
    recorder = Recorder()
    batcher = SampleBatcher(recorder, window_s=0.001, max_wait_s=0.01)

    async def apart() -> None:
        for n in range(3):
            await batcher.score(sample(f"s{n}"))
            await asyncio.sleep(0.02)

    asyncio.run(apart())
    assert [len(b) for b in recorder.batches] == [1, 1, 1]


def test_a_batch_waits_no_longer_than_max_wait_however_many_keep_arriving():
    recorder = Recorder()
    batcher = SampleBatcher(recorder, window_s=0.02, max_wait_s=0.05)

    async def steady() -> None:
        calls = []
        for n in range(30):  # one every 10 ms for 300 ms
            calls.append(asyncio.ensure_future(batcher.score(sample(f"s{n}"))))
            await asyncio.sleep(0.01)
        await asyncio.gather(*calls)

    asyncio.run(steady())
    assert len(recorder.batches) >= 3
    assert sum(len(b) for b in recorder.batches) == 30


def test_a_full_batch_is_sent_and_the_rest_start_another():
    recorder = Recorder()
    batcher = SampleBatcher(recorder, max_samples=8)

    async def many() -> None:
        await asyncio.gather(*(batcher.score(sample(f"s{n}")) for n in range(20)))

    asyncio.run(many())
    assert [len(b) for b in recorder.batches] == [8, 8, 4]


def test_an_error_of_the_batch_is_raised_in_every_call_of_it():
    batcher = SampleBatcher(Recorder(fail=RuntimeError("cluster gone")))

    async def many() -> list[object]:
        calls = (batcher.score(sample(f"s{n}")) for n in range(3))
        return list(await asyncio.gather(*calls, return_exceptions=True))

    outcomes = asyncio.run(many())
    assert all(isinstance(o, RuntimeError) and "cluster gone" in str(o) for o in outcomes)


def test_a_cancelled_call_leaves_the_others_their_results():
    recorder = Recorder(delay_s=0.05)
    batcher = SampleBatcher(recorder)

    async def one_cancelled() -> list[JobResult]:
        calls = [asyncio.ensure_future(batcher.score(sample(f"s{n}"))) for n in range(4)]
        await asyncio.sleep(0.01)
        calls[1].cancel()
        return [await call for n, call in enumerate(calls) if n != 1]

    assert [r.job_id for r in asyncio.run(one_cancelled())] == ["s0", "s2", "s3"]


def test_loops_of_different_threads_never_share_a_batch():
    recorder = Recorder(delay_s=0.02)
    batcher = SampleBatcher(recorder, window_s=0.02)
    results: dict[int, list[str]] = {}

    def thread(k: int) -> None:
        async def many() -> list[JobResult]:
            calls = (batcher.score(sample(f"t{k}-{n}")) for n in range(10))
            return list(await asyncio.gather(*calls))

        results[k] = [r.job_id for r in asyncio.run(many())]

    threads = [threading.Thread(target=thread, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: [f"t{k}-{n}" for n in range(10)] for k in range(4)}
    for batch in recorder.batches:
        assert len({str(s.completion).split("-")[0] for s in batch}) == 1


def test_nonsense_settings_are_refused():
    with pytest.raises(ValueError, match="window_s"):
        SampleBatcher(Recorder(), window_s=0.1, max_wait_s=0.01)
    with pytest.raises(ValueError, match="max_samples"):
        SampleBatcher(Recorder(), max_samples=0)
