"""Job records as the cluster stores them: packed, unpacked, loaded by a worker."""

from __future__ import annotations

import pytest

from chalk_client import ScoringJob, Transcript
from chalk_client.errors import InvalidJobError
from chalk_client.judges import AlwaysPassJudge
from chalk_client.records import COMPRESS_AT, load_job, pack_record, unpack_record


def test_a_long_record_is_compressed_and_loads_back():
    job = ScoringJob(id="long", transcript=Transcript(), judge=AlwaysPassJudge())
    job = job.model_copy(update={"metadata": {"note": "x" * COMPRESS_AT}})
    stored = pack_record(job.model_dump_json())
    assert isinstance(stored, bytes)
    assert load_job(stored, None) == job


@pytest.mark.parametrize(
    "stored",
    [
        b"\xffz\xff\xff\x4a\x4a",  # found by fuzz.jobs: the mark, then no zlib stream
        pack_record('{"judge": {"type": "always_pass"}, "id": "' + "x" * 2000 + '"}')[:-9],
    ],
    ids=["no-zlib-stream", "truncated"],
)
def test_a_damaged_compressed_record_is_an_invalid_job_not_a_zlib_error(stored):
    with pytest.raises(InvalidJobError, match="compressed but damaged"):
        unpack_record(stored)
    with pytest.raises(InvalidJobError, match="submit the job again"):
        load_job(stored, None)
