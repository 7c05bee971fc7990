"""``chalk serve``'s ``/run_code`` against the same programs scored in process.

N trivial Python programs (``print`` of a number, each distinct) are run two
ways, in turns, for several rounds:

- **HTTP**: posted to a ``chalk serve`` (embedded queue, started here, access
  log off) as SandboxFusion's ``/run_code`` requests by 32 concurrent clients
  on loopback. The clients are 32 keep-alive connections driven by one asyncio
  loop writing ready-made requests, so the load generator's own cost stays
  small beside the server's;
- **in process**: the same programs, as the same jobs (a one-test ``tests``
  judge that keeps the output), scored by ``chalk_worker.score_jobs`` with 32
  in flight: the Python path with no HTTP at all.

Printed: requests per second and the p50/p99 latency of the HTTP path, jobs
per second in process, and their ratio, the HTTP path's cost per request over
the in-process one (goal <= 1.2); and HTTP requests per second (goal >= 100 on
two cores). The figure of each is the median round.

    .venv/bin/python -m bench.http_api [--requests 600] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.suite import Figure
from chalk_client.server.programs import ProgramRun
from chalk_worker import score_jobs
from chalk_worker.testing.redis_server import free_port, stop, wait_port

CLIENTS = 32
COST_GOAL = 1.2
RATE_GOAL = 100.0
ROOT = Path(__file__).resolve().parents[1]


def _programs(count: int) -> list[str]:
    tag = uuid.uuid4().hex[:8]  # distinct from any earlier run's (no build found cached)
    return [f"print({n})  # {tag}" for n in range(count)]


def _request(port: int, code: str) -> bytes:
    body = json.dumps({"code": code, "language": "python", "run_timeout": 5}).encode()
    head = (
        f"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length)


async def _http_round(port: int, programs: list[str]) -> tuple[float, list[float]]:
    requests = [_request(port, code) for code in programs]
    todo = iter(range(len(requests)))
    latencies: list[float] = []
    failures: list[str] = []

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for index in todo:
                started = time.perf_counter()
                writer.write(requests[index])
                answer = json.loads(await _read_response(reader))
                latencies.append(time.perf_counter() - started)
                if answer.get("status") != "Success":
                    failures.append(str(answer)[:300])
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} requests did not succeed, e.g. {failures[0]}")
    return elapsed, latencies


def _in_process_round(programs: list[str]) -> float:
    jobs = [ProgramRun(language="python", code=code, time_limit_s=5).job() for code in programs]
    started = time.perf_counter()
    results = score_jobs(jobs, concurrency=CLIENTS)
    elapsed = time.perf_counter() - started
    bad = [r for r in results if r.scoring is None or r.scoring.score != 1.0]
    if bad:
        raise RuntimeError(f"{len(bad)} jobs did not succeed, e.g. {bad[0]}")
    return elapsed


def _start_server(port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    env["CHALK_SERVER_MAX_IN_FLIGHT"] = str(CLIENTS * 2)
    command = [sys.executable, "-m", "chalk_client.cli", "serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--no-access-log", "--log-level", "warning"], cwd=ROOT, env=env
    )
    if not wait_port(port, timeout=60):
        stop(proc)
        raise RuntimeError("chalk serve did not start")
    return proc


def measure(count: int, rounds: int) -> dict[str, float]:
    """Median seconds of each path over ``rounds`` rounds of ``count`` programs, and latencies."""
    port = free_port()
    server = _start_server(port)
    try:
        asyncio.run(_http_round(port, _programs(CLIENTS * 2)))  # warm both up
        _in_process_round(_programs(CLIENTS * 2))
        http_s, local_s, p50, p99 = [], [], [], []
        for _ in range(rounds):
            elapsed, latencies = asyncio.run(_http_round(port, _programs(count)))
            http_s.append(elapsed)
            cuts = statistics.quantiles(latencies, n=100)
            p50.append(cuts[49])
            p99.append(cuts[98])
            local_s.append(_in_process_round(_programs(count)))
    finally:
        stop(server)
    return {
        "http_s": statistics.median(http_s),
        "local_s": statistics.median(local_s),
        "p50_ms": statistics.median(p50) * 1000,
        "p99_ms": statistics.median(p99) * 1000,
    }


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figures (``python -m bench``)."""
    count, rounds = (64, 1) if smoke else (600, 3)
    found = measure(count, rounds)
    http_rate, local_rate = count / found["http_s"], count / found["local_s"]
    return [
        Figure(
            name=f"/run_code, {CLIENTS} clients: cost per request vs score_jobs",
            value=f"{http_rate:.0f} req/s (p50 {found['p50_ms']:.0f} ms, p99 "
            f"{found['p99_ms']:.0f} ms)",
            baseline=f"{local_rate:.0f} jobs/s in process",
            ratio=found["http_s"] / found["local_s"],
            goal=f"<= {COST_GOAL}",
        ),
        Figure(
            name="/run_code requests per second (trivial Python)",
            value=f"{http_rate:.0f} req/s on {os.cpu_count()} cores",
            baseline=f"{RATE_GOAL:.0f} req/s",
            ratio=http_rate / RATE_GOAL,
            goal=">= 1.0",
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600, help="programs per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found = measure(args.requests, args.rounds)
    http_rate = args.requests / found["http_s"]
    local_rate = args.requests / found["local_s"]
    print(
        f"HTTP /run_code, {CLIENTS} clients: {http_rate:.1f} req/s, "
        f"p50 {found['p50_ms']:.1f} ms, p99 {found['p99_ms']:.1f} ms"
    )
    print(f"in process (score_jobs, {CLIENTS} in flight): {local_rate:.1f} jobs/s")
    print(
        f"cost per request, HTTP / in process: {found['http_s'] / found['local_s']:.2f} "
        f"(goal <= {COST_GOAL}); requests per second {http_rate:.0f} (goal >= {RATE_GOAL:.0f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
