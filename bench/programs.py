"""The tests judge against a bare loop: the same programs, compilers and flags, unsandboxed.

For each language, ``--programs`` programs (each made distinct, so that no
build is found in Chalk's build cache) read n numbers and print their sum;
each runs on ten tests (n from 10 to 100,000). Chalk scores them as jobs of
the ``tests`` judge in this process (``score_jobs``, the runner a worker
runs): built in the sandbox, each test in the sandbox, CPU time and memory
from the cgroups. The baseline is what a harness without a sandbox would do:
write the source to a folder, compile it with the very command Chalk uses,
run each test with ``subprocess`` (stdin from a file holding the test's input,
stdout captured, the environment Chalk gives programs), compare tokens;
programs in parallel, as many at once as the machine has cores (Chalk runs
one program per core too). Per round and language, the two
take turns; the figure is the sum over languages of the median round.

Printed per language: the bare loop's seconds, Chalk's, their ratio; then
the total (goal <= 1.2), and Chalk scoring the same programs again, every
build from its cache, against the bare loop compiling them again.

    .venv/bin/python -m bench.programs [--programs 3] [--rounds 3] [--only c,cpp]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.suite import Figure
from chalk_client import JobStatus, ScoringJob, Transcript
from chalk_client.judges import TestsJudge
from chalk_client.program_tests import TestCase
from chalk_client.scoring import Verdict
from chalk_client.transcript import Message
from chalk_worker import score_jobs
from chalk_worker.judges.programs.languages import Toolchain, java_main_class, toolchains

GOAL = 1.2
"""Chalk's time over the bare loop's, at most."""

SUM: dict[str, str] = {
    "python": "import sys\ndata = sys.stdin.buffer.read().split()\n"
    "print(sum(map(int, data[1 : 1 + int(data[0])])))",
    "c": '#include <stdio.h>\nint main(void){ long n, x, s = 0; if (scanf("%ld", &n) != 1) '
    'return 1; for (long i = 0; i < n; i++) { scanf("%ld", &x); s += x; } '
    'printf("%ld\\n", s); return 0; }',
    "cpp": "#include <iostream>\nint main(){ std::ios::sync_with_stdio(false); std::cin.tie(0);"
    " long n, x, s = 0; std::cin >> n; for (long i = 0; i < n; i++) { std::cin >> x; s += x; }"
    " std::cout << s << '\\n'; }",
    "java": "import java.io.*;\npublic class Main { public static void main(String[] a) "
    "throws IOException { StreamTokenizer t = new StreamTokenizer(new BufferedInputStream("
    "System.in)); t.nextToken(); long n = (long) t.nval, s = 0; for (long i = 0; i < n; i++) "
    "{ t.nextToken(); s += (long) t.nval; } System.out.println(s); } }",
    "go": 'package main\nimport (\n"bufio"\n"fmt"\n"os"\n)\nfunc main(){ r := '
    "bufio.NewReader(os.Stdin); var n, x, s int64; fmt.Fscan(r, &n); for i := int64(0); "
    "i < n; i++ { fmt.Fscan(r, &x); s += x }; fmt.Println(s) }",
    "rust": "use std::io::Read;\nfn main(){ let mut t = String::new(); "
    "std::io::stdin().read_to_string(&mut t).unwrap(); let mut w = t.split_whitespace()"
    ".map(|x| x.parse::<i64>().unwrap()); let n = w.next().unwrap() as usize; "
    'let s: i64 = w.take(n).sum(); println!("{}", s); }',
    "javascript": 'const d = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/);'
    "\nlet s = 0; for (let i = 1; i <= +d[0]; i++) s += +d[i];\nconsole.log(s);",
    "bash": 'read n\nread -a a\ns=0\nfor x in "${a[@]}"; do s=$((s + x)); done\necho $s',
}
"""Each language's program: the sum of n numbers."""

COMMENT = {"python": "#", "bash": "#"}
"""How a line comment starts (``//`` where not named)."""


def tests(seed: int) -> list[TestCase]:
    """Ten tests: n numbers (n from 10 to 100,000) on one line, and their sum."""
    rng = random.Random(seed)
    cases = []
    for n in (10, 10, 100, 100, 1_000, 1_000, 10_000, 10_000, 100_000, 100_000):
        numbers = [rng.randint(-(10**6), 10**6) for _ in range(n)]
        stdin = f"{n}\n{' '.join(map(str, numbers))}\n"
        cases.append(TestCase(stdin=stdin, stdout=f"{sum(numbers)}\n"))
    return cases


def programs(language: str, count: int) -> list[str]:
    """``count`` distinct sources of the language's program (a comment of its own each)."""
    mark = COMMENT.get(language, "//")
    return [f"{SUM[language]}\n{mark} program {uuid.uuid4()}\n" for _ in range(count)]


def chalk(language: str, sources: list[str], cases: list[TestCase]) -> float:
    """Seconds Chalk takes to score ``sources``; every test must be accepted."""
    jobs = [
        ScoringJob(
            transcript=Transcript(
                messages=[Message(role="assistant", content=f"```{language}\n{source}```")]
            ),
            judge=TestsJudge(language=language, tests=cases, time_limit_s=10),
        )
        for source in sources
    ]
    started = time.perf_counter()
    results = score_jobs(jobs)
    seconds = time.perf_counter() - started
    for result in results:
        tests_ = result.scoring.tests if result.scoring is not None else None
        if result.status is not JobStatus.SUCCEEDED or not tests_:
            raise SystemExit(f"chalk: {language}: {result.error or result.scoring}")
        if any(test.verdict is not Verdict.ACCEPTED for test in tests_):
            raise SystemExit(f"chalk: {language}: not every test accepted: {result.scoring}")
    return seconds


def _fill(words: tuple[str, ...], chain: Toolchain, values: dict[str, str]) -> list[str]:
    filled = []
    for word in words:
        for tool, path in chain.paths.items():
            word = word.replace(f"{{{tool}}}", path)
        for name, value in values.items():
            word = word.replace(name, value)
        filled.append(word)
    return filled


def bare_one(chain: Toolchain, source: str, cases: list[TestCase]) -> None:
    """Compile ``source`` as Chalk does, run each test with ``subprocess``, compare tokens."""
    spec = chain.spec
    folder = Path(tempfile.mkdtemp(prefix="bench-bare-"))
    try:
        name = spec.source_name
        main = java_main_class(source) if spec.name == "java" else ""
        if main:
            name = f"{main}.java"
        (folder / name).write_text(source)
        values = {"{build}": str(folder), "{main}": main, "{memory_mb}": "256"}
        # The environment Chalk gives programs, not this process's (NODE_EXTRA_CA_CERTS, say,
        # costs every Node start a certificate bundle).
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(folder),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            **{k: v.replace("{home}", str(folder)) for k, v in spec.env.items()},
        }
        if spec.compile is not None:
            argv = _fill(spec.compile, chain, {**values, "{source}": name})
            subprocess.run(argv, cwd=folder, env=env, check=True, capture_output=True)
        run = _fill(spec.run, chain, {**values, "{source}": str(folder / name)})
        given = folder / "input.txt"
        for case in cases:
            given.write_text(case.stdin)  # from a file, as Chalk gives it (and judges do)
            with given.open("rb") as stdin:
                done = subprocess.run(run, cwd=folder, env=env, stdin=stdin, capture_output=True)
            if done.stdout.split() != case.stdout.encode().split():
                raise SystemExit(f"bare: {spec.name}: wrong output {done.stdout[:80]!r}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def bare(language: str, sources: list[str], cases: list[TestCase]) -> float:
    """Seconds the bare loop takes for ``sources``, one program per core at a time."""
    chain = toolchains().found[language]
    started = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(lambda source: bare_one(chain, source, cases), sources))
    return time.perf_counter() - started


@dataclass
class Timed:
    """One language's rounds, each way."""

    language: str
    bare: list[float]
    chalk: list[float]
    cached: float
    """Chalk scoring the last round's programs again: every build from the cache."""
    bare_again: float


def measure(languages: list[str], count: int, rounds: int) -> list[Timed]:
    """Each language's rounds: bare and Chalk in turn, then Chalk on cached builds."""
    cases = tests(seed=7)
    found = []
    for language in languages:
        timed = Timed(language, [], [], 0.0, 0.0)
        sources: list[str] = []
        for number in range(rounds):
            sources = programs(language, count)
            if number % 2 == 0:
                timed.bare.append(bare(language, sources, cases))
                timed.chalk.append(chalk(language, sources, cases))
            else:
                timed.chalk.append(chalk(language, sources, cases))
                timed.bare.append(bare(language, sources, cases))
        timed.cached = chalk(language, sources, cases)
        timed.bare_again = bare(language, sources, cases)
        found.append(timed)
    return found


def _usable(only: list[str] | None) -> list[str]:
    chains = toolchains()
    wanted = only or list(SUM)
    missing = [name for name in wanted if name not in chains.found]
    if missing:
        raise SystemExit(f"no toolchain for {', '.join(missing)}: {chains.missing}")
    return wanted


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figures: Chalk over the bare loop, fresh builds, then cached builds."""
    timed = measure(_usable(None), 1 if smoke else 3, 1 if smoke else 3)
    bare_s = sum(statistics.median(t.bare) for t in timed)
    chalk_s = sum(statistics.median(t.chalk) for t in timed)
    again_s = sum(t.bare_again for t in timed)
    cached_s = sum(t.cached for t in timed)
    return [
        Figure(
            name="tests judge, 8 languages (chalk / bare loop)",
            value=f"{chalk_s:.2f} s",
            baseline=f"bare loop {bare_s:.2f} s",
            ratio=chalk_s / bare_s,
            goal=f"<= {GOAL}",
        ),
        Figure(
            name="tests judge, same programs again (build cache)",
            value=f"{cached_s:.2f} s",
            baseline=f"bare loop {again_s:.2f} s",
            ratio=cached_s / again_s,
            goal="<= 1.0",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=3, help="programs per language")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="comma-separated languages")
    args = parser.parse_args()
    languages = _usable(args.only.split(",") if args.only else None)
    timed = measure(languages, args.programs, args.rounds)
    print(f"{args.programs} programs per language, 10 tests each; median of {args.rounds} rounds")
    print(f"{'language':12} {'bare s':>8} {'chalk s':>8} {'ratio':>6}   cached: chalk s / bare s")
    for t in timed:
        b, c = statistics.median(t.bare), statistics.median(t.chalk)
        print(
            f"{t.language:12} {b:8.2f} {c:8.2f} {c / b:6.2f}   "
            f"{t.cached:.2f} / {t.bare_again:.2f} = {t.cached / t.bare_again:.2f}"
        )
    bare_s = sum(statistics.median(t.bare) for t in timed)
    chalk_s = sum(statistics.median(t.chalk) for t in timed)
    print(f"{'total':12} {bare_s:8.2f} {chalk_s:8.2f} {chalk_s / bare_s:6.2f}   (goal <= {GOAL})")
    print(f"rounds: bare {[[round(x, 2) for x in t.bare] for t in timed]}", file=sys.stderr)
    print(f"rounds: chalk {[[round(x, 2) for x in t.chalk] for t in timed]}", file=sys.stderr)


if __name__ == "__main__":
    main()
