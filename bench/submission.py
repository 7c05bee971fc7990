"""A 50 MB submission: the worker's memory growth, and unpacking against ``tar -xzf``.

Unpacking: Chalk's checked, streaming extractor and GNU tar on the same
archive, interleaved, best of several runs (goal: Chalk within 2x of tar).
Memory: one ``chalk worker`` on a private redis-server scores a job carrying
the archive; the growth of its peak RSS (``VmHWM``) over the warm worker's is
the cost of the submission (goal < 100 MB).

    python -m bench.submission [--mb 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bench.cluster import ROOT, worker
from bench.suite import Figure
from chalk_worker.sandbox.collect import unpack_submission
from chalk_worker.testing.redis_server import redis_server


def make_archive(megabytes: int) -> bytes:
    """A tar.gz of ``megabytes`` 1 MiB files of random bytes (so it stays that big)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        for n in range(megabytes):
            data = os.urandom(1 << 20)
            info = tarfile.TarInfo(f"work/part-{n:03d}.bin")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def unpack_times(archive: bytes, runs: int) -> tuple[float, float]:
    """Best seconds of Chalk's extractor and of ``tar -xzf`` on ``archive``."""
    chalk, tar = [], []
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "submission.tar.gz"
        path.write_bytes(archive)
        for run in range(runs):
            dest = Path(scratch) / f"chalk-{run}"
            dest.mkdir()
            started = time.perf_counter()
            unpack_submission(archive, dest, max_bytes=1 << 30, max_entries=10_000, max_depth=32)
            chalk.append(time.perf_counter() - started)
            shutil.rmtree(dest)
            dest = Path(scratch) / f"tar-{run}"
            dest.mkdir()
            started = time.perf_counter()
            subprocess.run(["tar", "-xzf", str(path), "-C", str(dest)], check=True)
            tar.append(time.perf_counter() - started)
            shutil.rmtree(dest)
    return min(chalk), min(tar)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def worker_growth(archive: bytes) -> tuple[float, float]:
    """Peak RSS of a warm worker, and its growth from scoring one job carrying ``archive``."""
    from chalk_client import ChalkClient, JobStatus, ScoringJob, Submission
    from chalk_client.judges import AlwaysPassJudge

    with redis_server() as url:
        argv = [sys.executable, "-m", "chalk_client.cli", "worker", "--loglevel", "WARNING"]
        argv += ["--without-mingle", "--without-gossip", "--pool", "threads"]
        with worker(argv, {"CHALK_REDIS_URL": url}) as proc, ChalkClient(url) as client:
            small = Submission.from_files({"a.txt": "warm-up"})
            for _ in range(3):
                client.submit_and_wait(ScoringJob(judge=AlwaysPassJudge(), submission=small), 60)
            before = _peak_rss_mb(proc.pid)
            job = ScoringJob(judge=AlwaysPassJudge(), submission=Submission.from_tar(archive))
            result = client.submit_and_wait(job, timeout=300)
            assert result.status is JobStatus.SUCCEEDED, result.error
            return before, _peak_rss_mb(proc.pid) - before


def figures(smoke: bool = False) -> list[Figure]:
    """Worker memory growth for the submission, and unpack time against tar."""
    megabytes = 5 if smoke else 50
    archive = make_archive(megabytes)
    chalk_s, tar_s = unpack_times(archive, 1 if smoke else 3)
    before, growth = worker_growth(archive)
    return [
        Figure(
            name=f"{len(archive) / 1e6:.0f} MB submission: worker peak RSS growth",
            value=f"{growth:.0f} MB",
            baseline=f"limit 100 MB (warm worker {before:.0f} MB)",
            ratio=growth / 100,
            goal="< 1.0",
        ),
        Figure(
            name=f"{len(archive) / 1e6:.0f} MB submission: unpack time",
            value=f"{chalk_s * 1000:.0f} ms",
            baseline=f"tar -xzf {tar_s * 1000:.0f} ms",
            ratio=chalk_s / tar_s,
            goal="<= 2.0",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    archive = make_archive(args.mb)
    print(f"archive: {len(archive) / 1e6:.1f} MB, {args.mb} files of 1 MiB")
    chalk_s, tar_s = unpack_times(archive, args.runs)
    print(
        f"unpack: chalk {chalk_s * 1000:.0f} ms, tar -xzf {tar_s * 1000:.0f} ms, ratio "
        f"{chalk_s / tar_s:.2f} (goal <= 2.0)"
    )
    before, growth = worker_growth(archive)
    print(f"worker peak RSS: {before:.0f} MB warm, +{growth:.0f} MB for the job (goal < 100 MB)")


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
