"""The ``tests`` judge: programs in every language against test cases, in the real sandbox.

Each language gets an accepted, a wrong, a compile-error, a time-limit, a
memory-limit and a runtime-error program. Then each way of comparing, tests
from files, where the program comes from, the build cache, the limits holding
on a loaded machine, and hostile programs (in a worker held in a test cgroup).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import score_capped

import tasks
from chalk_client import JobResult, JobStatus, ScoringJob, Submission, Transcript
from chalk_client.judges import TestsJudge
from chalk_client.scoring import Verdict, ZeroCause
from chalk_client.transcript import Message
from chalk_worker import score_job, score_jobs
from chalk_worker.judges.programs import languages
from chalk_worker.sandbox import detect_layers

LAYERS = detect_layers()
FULL = {"user", "namespaces", "network", "memory", "pids", "kill"} <= set(LAYERS.available)
pytestmark = pytest.mark.skipif(
    not FULL and os.environ.get("CI") != "true",
    reason="needs root, bubblewrap and writable cgroups (CI has them)",
)

AC, WA, PE, CE, TLE, MLE, RE, OLE, SKIPPED = (
    Verdict.ACCEPTED,
    Verdict.WRONG_ANSWER,
    Verdict.PRESENTATION_ERROR,
    Verdict.COMPILE_ERROR,
    Verdict.TIME_LIMIT,
    Verdict.MEMORY_LIMIT,
    Verdict.RUNTIME_ERROR,
    Verdict.OUTPUT_LIMIT,
    Verdict.SKIPPED,
)
SUMS = [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 7\n", "stdout": "12\n"}]
"""Two tests of a + b."""

PROGRAMS: dict[str, dict[str, str]] = {
    "python": {
        "ac": "a, b = map(int, input().split())\nprint(a + b)",
        "wa": "print(4)",
        "ce": "def f(:\n    pass",
        "tle": "while True:\n    pass",
        "mle": "x = b'x' * (400 * 2**20)\nprint(len(x))",
        "re": "raise ValueError('no')",
    },
    "c": {
        "ac": '#include <stdio.h>\nint main(){long a,b; scanf("%ld %ld",&a,&b); '
        'printf("%ld\\n",a+b); return 0;}',
        "wa": '#include <stdio.h>\nint main(){puts("4"); return 0;}',
        "ce": "int main( { return 0; }",
        "tle": "int main(){volatile unsigned long x=0; for(;;) x++;}",
        "mle": "#include <stdlib.h>\n#include <stdio.h>\n"
        "int main(){volatile char *p=malloc(400u<<20); "
        'for(size_t i=0;i<(400u<<20);i+=4096) p[i]=1; printf("%d\\n",p[4096]);}',
        "re": "int main(){volatile int *p=0; return *p;}",
    },
    "cpp": {
        "ac": "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<'\\n';}",
        "wa": "#include <iostream>\nint main(){std::cout<<4<<'\\n';}",
        "ce": "int main() { return undeclared; }",
        "tle": "int main(){volatile unsigned long x=0; for(;;) x++;}",
        "mle": "#include <vector>\n#include <iostream>\n"
        "int main(){std::vector<char> v(400u<<20, 1); std::cout<<int(v[9])<<'\\n';}",
        "re": '#include <stdexcept>\nint main(){throw std::runtime_error("no");}',
    },
    "java": {
        "ac": "import java.util.*;\npublic class Sum { public static void main(String[] a) {"
        " Scanner s = new Scanner(System.in);"
        " System.out.println(s.nextLong() + s.nextLong()); } }",
        "wa": "public class Main { public static void main(String[] a) {"
        " System.out.println(4); } }",
        "ce": "public class Main { public static void main(String[] a) { int x = ; } }",
        "tle": "public class Main { public static void main(String[] a) {"
        " long x = 0; while (true) { x++; } } }",
        "mle": "import java.util.*;\npublic class Main { public static void main(String[] a) {"
        " List<long[]> kept = new ArrayList<>();"
        " while (true) { kept.add(new long[1 << 20]); } } }",
        "re": "public class Main { public static void main(String[] a) {"
        ' throw new RuntimeException("no"); } }',
    },
    "go": {
        "ac": 'package main\nimport "fmt"\nfunc main(){ var a, b int64; fmt.Scan(&a, &b); '
        "fmt.Println(a+b) }",
        "wa": 'package main\nimport "fmt"\nfunc main(){ fmt.Println(4) }',
        "ce": "package main\nfunc main(){ x := }",
        "tle": "package main\nfunc main(){ x := 0; for { x++ } }",
        "mle": 'package main\nimport "fmt"\nfunc main(){ b := make([]byte, 400<<20); '
        "for i := range b { b[i] = 1 }; fmt.Println(b[7]) }",
        "re": 'package main\nfunc main(){ panic("no") }',
    },
    "rust": {
        "ac": "use std::io::Read;\nfn main(){ let mut s = String::new(); "
        "std::io::stdin().read_to_string(&mut s).unwrap(); "
        "let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect(); "
        'println!("{}", v[0] + v[1]); }',
        "wa": 'fn main(){ println!("4"); }',
        "ce": "fn main(){ let x: i32 = ; }",
        "tle": "fn main(){ let mut x: u64 = 0; loop { x = x.wrapping_add(1); "
        "unsafe { std::ptr::read_volatile(&x); } } }",
        "mle": 'fn main(){ let v = vec![1u8; 400 << 20]; println!("{}", v[7]); }',
        "re": 'fn main(){ panic!("no"); }',
    },
    "javascript": {
        "ac": 'const d = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);'
        "\nconsole.log(d[0] + d[1]);",
        "wa": "console.log(4);",
        "ce": "function ( {",
        "tle": "for (;;) {}",
        "mle": "const a = []; while (true) { a.push(new Array(1e6).fill(1.5)); }",
        "re": 'throw new Error("no");',
    },
    "bash": {
        "ac": "read a b\necho $((a + b))",
        "wa": "echo 4",
        "ce": "if then fi (",
        "tle": "while :; do :; done",
        "mle": "x=$(head -c 400000000 /dev/zero | tr '\\0' a)\necho ${#x}",
        "re": "exit 3",
    },
}
EXPECTED = {
    "ac": [AC, AC],
    "wa": [WA, SKIPPED],
    "ce": [CE, CE],
    "tle": [TLE, SKIPPED],
    "mle": [MLE, SKIPPED],
    "re": [RE, SKIPPED],
}


def said(language: str, code: str, text: str = "Here it is:") -> Transcript:
    """An answer whose last assistant message holds ``code`` in a ```language fence."""
    return Transcript(
        messages=[
            Message(role="user", content="Add two numbers."),
            Message(role="assistant", content=f"{text}\n\n```{language}\n{code}\n```\n"),
        ]
    )


def job_of(code: str, fence: str = "python", job_id: str | None = None, **judge: Any) -> ScoringJob:
    """A job whose answer holds ``code`` in a ```fence block, judged by ``TestsJudge(**judge)``."""
    if "tests_file" not in judge:
        judge.setdefault("tests", SUMS)
    return ScoringJob(id=job_id, transcript=said(fence, code), judge=TestsJudge(**judge))


def verdicts(result: JobResult) -> list[Verdict]:
    assert result.status is JobStatus.SUCCEEDED, result.error
    assert result.scoring is not None and result.scoring.tests is not None, result.scoring
    return [test.verdict for test in result.scoring.tests]


@pytest.mark.slow
@pytest.mark.parametrize("language", list(PROGRAMS))
def test_every_language_gets_the_verdict_each_program_earns(language: str) -> None:
    jobs = [
        job_of(
            code,
            language,
            job_id=f"{language}-{kind}",
            language="auto",
            time_limit_s=1.0,
            memory_limit_mb=96,
            stop_at_first_failure=True,
        )
        for kind, code in PROGRAMS[language].items()
    ]
    results = {r.job_id: r for r in score_jobs(jobs)}
    for kind, expected in EXPECTED.items():
        result = results[f"{language}-{kind}"]
        assert verdicts(result) == expected, (kind, result.scoring)
        scoring = result.scoring
        assert scoring is not None
        if language == "python" and kind != "ce":  # checked as it starts: no compile
            assert scoring.compile is None, scoring.compile
        else:
            assert scoring.compile is not None
            assert scoring.compile.ok == (kind != "ce"), scoring.compile
        assert scoring.metadata["language"] == language
        assert scoring.score == (1.0 if kind == "ac" else 0.0)
        assert scoring.continue_task == (kind == "ac")
        first = scoring.tests[0] if scoring.tests else None
        assert first is not None
        if kind == "ce":
            assert scoring.compile is not None
            assert scoring.cause is ZeroCause.COMPILE_ERROR and scoring.compile.stderr
            assert first.cpu_s is None and first.exit_code is None
            continue
        assert first.cpu_s is not None and first.wall_s is not None
        assert first.memory_mb is not None
        if kind == "tle":
            assert first.cpu_s >= 0.9, first  # CPU time, measured
        if kind == "mle":
            assert first.memory_mb >= 50, first
        if kind == "re":
            assert first.exit_code != 0, first


def test_a_job_s_result_carries_each_test_and_the_compile_as_json() -> None:
    result = score_job(job_of(PROGRAMS["c"]["ac"], "c", language="c"))
    again = JobResult.model_validate_json(result.model_dump_json())
    assert again.scoring is not None and again.scoring.tests is not None
    assert [t.verdict for t in again.scoring.tests] == [AC, AC]
    assert again.scoring.compile is not None and again.scoring.compile.ok
    assert again.scoring.metadata["passed"] == "2/2"


# -- comparing -------------------------------------------------------------------------


def test_tokens_ignore_layout_and_exact_calls_it_a_presentation_error() -> None:
    code = "a, b = map(int, input().split())\nprint(' ', a + b, ' ')"
    assert verdicts(score_job(job_of(code))) == [AC, AC]
    result = score_job(job_of(code, compare="exact"))
    assert verdicts(result) == [PE, PE]
    assert result.scoring is not None and result.scoring.score == 0.0
    assert verdicts(score_job(job_of("print(3)", compare="exact"))) == [AC, WA]


def test_numbers_within_the_tolerance_are_accepted() -> None:
    tests = [{"stdin": "", "stdout": "0.3333333333 2\n"}, {"stdin": "", "stdout": "1e9 x\n"}]
    result = score_job(job_of("print(1/3, 2)", tests=tests, compare={"float_tolerance": 1e-6}))
    assert verdicts(result)[0] is AC
    far = score_job(job_of("print(0.334, 2)", tests=tests[:1], compare={"float_tolerance": 1e-6}))
    assert verdicts(far) == [WA]
    assert far.scoring is not None and far.scoring.tests is not None
    assert "0.334" in (far.scoring.tests[0].detail or "")
    relative = score_job(
        job_of("print(1000000001, 'x')", tests=tests[1:], compare={"float_tolerance": 1e-6})
    )
    assert verdicts(relative) == [AC]  # within 1e-6 of 1e9, relatively


CHECKER = ["{python}", "-m", "tasks.pair_sum.checker"]
PAIRS = """\
n, target = map(int, input().split())
values = list(map(int, input().split()))
seen = {}
for j, v in enumerate(values, 1):
    if target - v in seen:
        print(seen[target - v], j)
        break
    seen.setdefault(v, j)
else:
    print(-1)
"""


def test_a_checker_accepts_any_right_answer_and_says_why_not() -> None:
    judge: dict[str, Any] = {
        "tests_file": "tasks/pair_sum/tests.jsonl",
        "compare": {"checker": CHECKER},
    }
    result = score_job(job_of(PAIRS, **judge))
    assert set(verdicts(result)) == {AC}
    assert result.scoring is not None and result.scoring.tests is not None
    assert result.scoring.tests[0].detail == "a right pair"
    last_pair = PAIRS.replace("print(seen[target - v], j)\n        break", "pass").replace(
        "else:\n    print(-1)", "print(-1)"
    )
    wrong = score_job(job_of(last_pair, **judge))
    assert WA in verdicts(wrong)
    assert (
        wrong.scoring is not None
        and "said -1, but a pair exists" in wrong.scoring.metadata["first_failure"]
    )
    layout = score_job(job_of("print('one two')", **judge))
    assert verdicts(layout)[0] is PE


@pytest.mark.parametrize(
    "checker_code, problem",
    [
        ("import sys; sys.exit(3)", "not 0, 1 or 2"),
        ("raise RuntimeError('checker bug')", "checker bug"),
        ("import time; time.sleep(120)", "timed out"),
    ],
)
def test_a_checker_that_misbehaves_is_the_grader_s_error(
    checker_code: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalk_worker.judges.programs import checker

    monkeypatch.setattr(checker, "CHECKER_WALL_S", 2.0)
    result = score_job(job_of("print(3)", compare={"checker": ["{python}", "-c", checker_code]}))
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring is not None and result.scoring.grader_error
    assert problem in result.scoring.metadata["error"]


@pytest.mark.parametrize(
    "command",
    [
        ["{python}", "/nonexistent/check.py"],  # Python: "can't open file", exit 2
        ["{python}", "-m", "tasks.pair_sum.checkr"],  # a typo: "No module named", exit 1
        ["bash", "-c", "if then"],  # a syntax error: exit 2
        ["{python}", "check.py"],  # a relative path: not found, exit 2
    ],
    ids=["missing script", "module typo", "bash syntax", "relative path"],
)
def test_a_checker_that_would_mark_every_answer_wrong_is_the_grader_s_error(
    command: list[str],
) -> None:
    result = score_job(job_of(PROGRAMS["python"]["ac"], compare={"checker": command}))
    assert result.scoring is not None and result.scoring.grader_error, result.scoring
    assert "does not accept a test's expected output" in result.scoring.metadata["error"]


def test_a_checker_may_come_with_the_submission_or_from_a_host_path(tmp_path: Path) -> None:
    check = (
        "import sys\nsys.exit(0 if open(sys.argv[2]).read().split() == "
        "open(sys.argv[3]).read().split() else 1)\n"
    )
    host = tmp_path / "checks"
    host.mkdir()
    host.chmod(0o755)
    (host / "same.py").write_text(check)
    (host / "same.py").chmod(0o644)
    for command, files in (
        (["{python}", "{submission_dir}/same.py"], {"same.py": check}),
        (["{python}", str(host / "same.py")], {"x": "1"}),
    ):
        job = ScoringJob(
            transcript=said("python", "print(3)"),
            judge=TestsJudge(tests=SUMS, compare={"checker": command}),
            submission=Submission.from_files(files),
        )
        assert verdicts(score_job(job)) == [AC, WA], command


# -- where tests and programs come from ---------------------------------------------


def test_tests_come_from_a_file_in_the_submission_read_line_by_line(tmp_path: Path) -> None:
    lines = "".join(f'{{"stdin": "{n} {n}", "stdout": "{2 * n}"}}\n' for n in range(300))
    job = ScoringJob(
        transcript=said("python", "a, b = map(int, input().split())\nprint(a + b)"),
        judge=TestsJudge(tests_file="{submission_dir}/tests.jsonl"),
        submission=Submission.from_files({"tests.jsonl": lines + "\n"}),
    )
    result = score_job(job)
    assert verdicts(result) == [AC] * 300
    assert result.score == 1.0


@pytest.mark.parametrize(
    "tests_file, files, problem",
    [
        ("{submission_dir}/../../etc/passwd", {"x": "1"}, "without '..'"),
        ("{submission_dir}/missing.jsonl", {"x": "1"}, "is not a file in the submission"),
        ("{submission_dir}/bad.jsonl", {"bad.jsonl": '{"stdin": "1"}\n'}, "line 1: stdout"),
        ("tasks/no_such_task/tests.jsonl", {"x": "1"}, "is not a file in the tasks folder"),
        ("/etc/passwd", {"x": "1"}, "below a folder of tasks"),
    ],
)
def test_a_tests_file_that_cannot_be_read_is_the_grader_s_error(
    tests_file: str, files: dict[str, str], problem: str
) -> None:
    try:
        judge = TestsJudge(tests_file=tests_file)
    except ValueError as exc:  # refused as the job is made
        assert problem in str(exc)
        return
    job = ScoringJob(
        transcript=said("python", "print(1)"),
        judge=judge,
        submission=Submission.from_files(files),
    )
    result = score_job(job)
    assert result.scoring is not None and result.scoring.grader_error, result
    assert problem in result.scoring.metadata["error"]


def test_the_program_can_be_a_file_of_the_submission_its_extension_the_language() -> None:
    job = ScoringJob(
        transcript=Transcript(),
        judge=TestsJudge(source="src/solution.c", tests=SUMS),
        submission=Submission.from_files({"src/solution.c": PROGRAMS["c"]["ac"]}),
    )
    result = score_job(job)
    assert verdicts(result) == [AC, AC]
    assert result.scoring is not None and result.scoring.metadata["language"] == "c"


def test_auto_reads_the_last_fence_naming_a_language() -> None:
    transcript = Transcript(
        messages=[
            Message(role="assistant", content="```cpp\nint main( {\n```"),
            Message(
                role="assistant",
                content="First:\n```text\nnot code\n```\nThen:\n```py\nprint(3)\n```\nDone.",
            ),
        ]
    )
    result = score_job(ScoringJob(transcript=transcript, judge=TestsJudge(tests=SUMS)))
    assert verdicts(result) == [AC, WA]
    assert result.scoring is not None and result.scoring.metadata["language"] == "python"


@pytest.mark.parametrize(
    "content, language, problem",
    [
        ("No code today.", "auto", "no code block whose fence names a language"),
        ("```text\nprint(3)\n```", "auto", "no code block whose fence names a language"),
        ("```java\nclass A {}\n```", "cpp", "no ```cpp code block"),
    ],
)
def test_no_program_is_a_compile_error_of_every_test(
    content: str, language: str, problem: str
) -> None:
    transcript = Transcript(messages=[Message(role="assistant", content=content)])
    result = score_job(
        ScoringJob(transcript=transcript, judge=TestsJudge(language=language, tests=SUMS))
    )
    assert verdicts(result) == [CE, CE]
    assert result.scoring is not None and result.scoring.cause is ZeroCause.COMPILE_ERROR
    assert not result.scoring.grader_error
    assert result.scoring.compile is not None and problem in result.scoring.compile.stderr


def test_java_s_main_class_is_read_from_the_code_not_its_comments_or_strings() -> None:
    code = (
        "// Unlike a public class Foo, this one reads two numbers.\n"
        "/* public class Bar */\n"
        'import java.util.*;\npublic class Adder { static String s = "public class Baz";'
        " public static void main(String[] a) { Scanner in = new Scanner(System.in);"
        " System.out.println(in.nextLong() + in.nextLong()); } }"
    )
    assert verdicts(score_job(job_of(code, "java", language="java"))) == [AC, AC]


def test_all_or_nothing_scores_one_only_when_every_test_passes() -> None:
    assert score_job(job_of("print(3)", scoring="all_or_nothing")).score == 0.0
    assert score_job(job_of("print(3)")).score == 0.5
    ac = PROGRAMS["python"]["ac"]
    assert score_job(job_of(ac, scoring="all_or_nothing")).score == 1.0


def test_the_same_program_is_built_once() -> None:
    code = PROGRAMS["c"]["ac"] + f"\n// {uuid.uuid4()}: a program no earlier run built"
    first = score_job(job_of(code, "c", language="c"))
    second = score_job(job_of(code, "c", language="c"))
    other = score_job(job_of(code + "\n// another program", "c", language="c"))
    for result, cached in ((first, False), (second, True), (other, False)):
        assert verdicts(result) == [AC, AC]
        assert result.scoring is not None and result.scoring.compile is not None
        assert result.scoring.compile.cached is cached


def test_a_worker_without_the_toolchain_says_so_and_never_scores_the_student_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = languages.toolchains()
    missing = languages.Toolchains(
        {name: chain for name, chain in found.found.items() if name != "rust"},
        {"rust": "rustc not found on /usr/local/bin:/usr/bin:/bin: install it (Debian: rustc)"},
    )
    monkeypatch.setattr(languages, "_detected", missing)
    result = score_job(job_of(PROGRAMS["rust"]["ac"], "rust"))
    assert result.scoring is not None and result.scoring.grader_error
    assert "cannot run rust programs" in result.scoring.metadata["error"]
    assert "install it" in result.scoring.metadata["error"]


def test_a_toolchain_the_sandbox_cannot_see_is_the_grader_s_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found on the system's PATH, but a link to a folder the sandbox does not show.
    hidden = tmp_path / "opt" / "bash"
    hidden.parent.mkdir()
    shutil.copy("/bin/bash", hidden)
    found = languages.toolchains()
    bash = found.found["bash"]
    elsewhere = languages.Toolchain(bash.spec, {"bash": str(hidden)}, bash.version)
    monkeypatch.setattr(
        languages, "_detected", languages.Toolchains({**found.found, "bash": elsewhere}, {})
    )
    result = score_job(job_of(PROGRAMS["bash"]["ac"], "bash", language="bash"))
    assert result.scoring is not None and result.scoring.grader_error, result.scoring
    assert "toolchain could not run in the sandbox" in result.scoring.metadata["error"]


# -- what a program can do to the tests, and to the worker ------------------------------


def test_each_test_starts_in_a_fresh_folder_and_cannot_change_the_build() -> None:
    code = """\
import os, sys
notes = [os.path.exists("note.txt")]
open("note.txt", "w").write("x")
try:
    open(sys.argv[0], "a").write("print(99)")
    notes.append("changed")
except OSError:
    notes.append("kept")
a, b = map(int, input().split())
print(a + b if notes == [False, "kept"] else notes)
"""
    assert verdicts(score_job(job_of(code))) == [AC, AC]


def test_the_program_and_its_compile_cannot_read_the_task_s_tests_file() -> None:
    tests_file = Path(tasks.__file__).parent / "pair_sum" / "tests.jsonl"
    spy = f"""\
import os
try:
    print(len(open({str(tests_file)!r}).read()))
except OSError as exc:
    print("hidden", sorted(os.listdir({str(tests_file.parent.parent)!r})))
"""
    result = score_job(job_of(spy, tests=[{"stdin": "", "stdout": "hidden []"}]))
    assert verdicts(result) == [AC], result.scoring
    # Nor, running warm, any task package a warm interpreter imported ahead.
    modules = "import sys\nprint(sorted(m for m in sys.modules if m.startswith('tasks')))"
    result = score_job(job_of(modules, tests=[{"stdin": "", "stdout": "[]"}]))
    assert verdicts(result) == [AC], result.scoring
    embed = 'fn main(){ println!("{}", include_str!("TESTS").len()); }'.replace(
        "TESTS", str(tests_file)
    )
    built = score_job(job_of(embed, "rust", language="rust", tests=SUMS[:1]))
    assert verdicts(built) == [CE]
    assert built.scoring is not None and built.scoring.compile is not None
    assert "couldn't read" in built.scoring.compile.stderr


def test_each_test_s_memory_is_its_own_not_the_last_test_s_tmp() -> None:
    # The last run's /tmp may still be held as a run starts: not this run's memory.
    code = (
        "what = input().strip()\n"
        "if what == 'fill':\n    open('/tmp/big', 'wb').write(b'x' * (110 << 20))\n"
        "else:\n    kept = b'y' * (110 << 20)\n"
        "print(3)"
    )
    tests = [{"stdin": what, "stdout": "3"} for what in ("fill", "alloc", "alloc")]
    result = score_job(job_of(code, tests=tests, memory_limit_mb=512))
    assert verdicts(result) == [AC, AC, AC]
    assert result.scoring is not None and result.scoring.tests is not None
    for test in result.scoring.tests:
        assert test.memory_mb is not None and test.memory_mb >= 105, result.scoring.tests


def test_a_program_that_waits_is_a_time_limit_without_a_second_run() -> None:
    result = score_job(job_of("import time\ntime.sleep(30)", time_limit_s=0.5, tests=SUMS[:1]))
    assert verdicts(result) == [TLE]
    assert result.scoring is not None and result.scoring.tests is not None
    test = result.scoring.tests[0]
    assert not test.retried and "waits for something" in (test.detail or "")
    assert test.wall_s is not None and test.wall_s >= 2.5  # the cap: 3 x 0.5 s + 1 s


def test_a_wall_limit_the_judge_sets_is_a_time_limit_at_that_time_without_a_second_run() -> None:
    job = job_of("import time\ntime.sleep(30)", time_limit_s=5, wall_limit_s=0.5, tests=SUMS[:1])
    result = score_job(job)
    assert verdicts(result) == [TLE]
    assert result.scoring is not None and result.scoring.tests is not None
    test = result.scoring.tests[0]
    assert not test.retried and "wall-clock limit (0.5 s)" in (test.detail or ""), test
    assert test.wall_s is not None and test.wall_s < 2.5  # not the 16 s cap of a 5 s limit


def test_python_that_does_not_parse_is_a_compile_error_found_by_its_first_run() -> None:
    for code in ("def f(:\n    pass", "if True:\nprint(1)", "x = 1\n\tif x:\n        pass"):
        result = score_job(job_of(code))
        assert verdicts(result) == [CE, CE], code
        assert result.scoring is not None and result.scoring.compile is not None
        assert not result.scoring.compile.ok
        assert "Error:" in result.scoring.compile.stderr, result.scoring.compile
    # A syntax error met while running is the program's runtime error, not a compile error.
    late = score_job(job_of("exec('(')", tests=SUMS[:1]))
    assert verdicts(late) == [RE]
    assert late.scoring is not None and late.scoring.compile is None


def test_kept_output_and_tests_with_nothing_expected() -> None:
    code = "import sys\nprint('out', input())\nsys.stderr.write('err')\nsys.exit(int(input()))"
    tests = [
        {"stdin": "a\n0\n", "stdout": None},
        {"stdin": "b\n2\n", "stdout": None},
        {"stdin": "c\n0\n", "stdout": "out c"},
    ]
    result = score_job(job_of(code, tests=tests, keep_output=True))
    assert verdicts(result) == [AC, RE, AC]
    assert result.scoring is not None and result.scoring.tests is not None
    kept = [(t.stdout, t.stderr, t.exit_code) for t in result.scoring.tests]
    assert kept == [("out a\n", "err", 0), ("out b\n", "err", 2), ("out c\n", "err", 0)]
    plain = score_job(job_of(code, tests=tests))
    assert plain.scoring is not None and plain.scoring.tests is not None
    assert all(t.stdout is None and t.stderr is None for t in plain.scoring.tests)


def test_lines_ignore_trailing_spaces_and_outer_blank_lines_but_not_inner_layout() -> None:
    tests = [{"stdin": "", "stdout": "\n1 2  \n3\n\n"}]
    assert verdicts(score_job(job_of("print('1 2\\n3   ')", tests=tests, compare="lines"))) == [AC]
    assert verdicts(score_job(job_of("print('1  2\\n3')", tests=tests, compare="lines"))) == [WA]
    assert verdicts(score_job(job_of("print('1 2 3')", tests=tests, compare="lines"))) == [WA]


def test_a_program_that_sends_itself_sigxcpu_is_a_runtime_error_not_a_time_limit() -> None:
    # SIGXCPU within the limit by the cgroup's count: run again, then called what it is.
    result = score_job(job_of("kill -XCPU $$", "bash", language="bash", tests=SUMS[:1]))
    assert verdicts(result) == [RE]
    assert result.scoring is not None and result.scoring.tests is not None
    test = result.scoring.tests[0]
    assert test.retried and "SIGXCPU" in (test.detail or ""), test
    assert test.cpu_s is not None and test.cpu_s < 0.5, test


def test_output_past_the_cap_is_stopped_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHALK_PROGRAM_OUTPUT_MB", "4")
    code = "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)"
    result = score_job(job_of(code, tests=SUMS[:1], time_limit_s=10))
    assert verdicts(result) == [OLE]
    assert result.scoring is not None and result.scoring.tests is not None
    assert (result.scoring.tests[0].wall_s or 99) < 5


@pytest.fixture
def loaded_machine() -> Iterator[None]:
    """Busy loops, each in a session of its own (so the scheduler cannot lump them
    together), three for each core."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(3 * (os.cpu_count() or 1))
    ]
    time.sleep(0.5)
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.mark.slow
def test_cpu_time_limits_hold_on_a_loaded_machine(loaded_machine: None) -> None:
    # About 0.6 s of CPU against a limit of 2 s: on a loaded machine it takes longer by the
    # clock, and is still accepted.
    code = (
        "#include <stdio.h>\nint main(){volatile unsigned long x=0; "
        'for(unsigned long i=0;i<300000000UL;i++) x+=i; printf("3\\n");}'
    )
    result = score_job(job_of(code, "c", language="c", tests=SUMS[:1] * 3, time_limit_s=2.0))
    assert verdicts(result) == [AC, AC, AC], result.scoring
    assert result.scoring is not None and result.scoring.tests is not None
    for test in result.scoring.tests:
        assert test.cpu_s is not None and test.cpu_s < 2.0
    slowest = max(test.wall_s or 0 for test in result.scoring.tests)
    fastest = min(test.cpu_s or 0 for test in result.scoring.tests)
    assert slowest > fastest * 1.3  # the clock ran well past the CPU time it used


# -- hostile programs, in a worker held in a test cgroup ----------------------------------

HOSTILE: dict[str, tuple[str, str, list[Verdict], dict[str, Any]]] = {
    "fork bomb": (  # its processes' CPU time adds up in the slot's cgroup
        "c",
        "#include <unistd.h>\n#include <stdio.h>\n"
        'int main(){for(int i=0;i<100000;i++) fork(); puts("3"); return 0;}',
        [TLE],
        {},
    ),
    "memory bomb": (
        "cpp",
        "#include <vector>\nint main(){std::vector<std::vector<char>> v; "
        "for(;;) v.emplace_back(1u<<24, 7);}",
        [MLE],
        {},
    ),
    "100 MB of output": (
        "python",
        "import sys\nfor _ in range(1600):\n    sys.stdout.write('z' * 65536)",
        [OLE],
        {},
    ),
    "the network": (
        "python",
        "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n"
        "    print('reached')\nexcept OSError:\n    print(3)",
        [AC],
        {},
    ),
    "the worker's secrets": (
        "python",
        "import os\nfound = [k for k in os.environ if 'OPENAI' in k or 'REDIS' in k]\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        if b'sk-hostile' in open(f'/proc/{pid}/environ', 'rb').read():\n"
        "            found.append(pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(3 if not found else found)",
        [AC],
        {},
    ),
    "a compile that reads /dev/random": (
        "cpp",
        '#include "/dev/random"\nint main(){}',
        [CE],
        {},
    ),
    "a compile that writes a 16 GB object": (
        "c",
        "char big[1ull << 34] = {1};\nint main(){ return big[0]; }",
        [CE],
        {},
    ),
    "a template explosion": (
        "cpp",
        "template<int N> struct F { static const long v = F<N-1>::v + F<N-2>::v + F<N-3>::v; };"
        "\ntemplate<> struct F<0> { static const long v = 1; };"
        "\ntemplate<> struct F<-1> { static const long v = 1; };"
        "\ntemplate<> struct F<-2> { static const long v = 1; };"
        "\nint main(){ return F<100000>::v; }",
        [CE],
        {},
    ),
}


@pytest.mark.slow
@pytest.mark.usefixtures("python_start")
@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_programs_are_contained_and_the_worker_goes_on(
    case: str, test_cap: list[Path], tmp_path: Path
) -> None:
    language, code, expected, judge = HOSTILE[case]
    hostile = job_of(code, language, job_id="hostile", language=language, tests=SUMS[:1], **judge)
    good = job_of(PROGRAMS["python"]["ac"], job_id="good")
    results = score_capped(
        [hostile, good],
        test_cap,
        tmp_path,
        OPENAI_API_KEY="sk-hostile",
        CHALK_COMPILE_WALL_S="20",
        CHALK_COMPILE_MEMORY_MB="512",
    )
    assert verdicts(results["good"]) == [AC, AC]
    assert verdicts(results["hostile"]) == expected, results["hostile"].scoring


def test_a_build_cache_someone_else_made_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a shared work folder (/tmp by default) anyone may make chalk-builds first, and
    # plant a right program under the key of a wrong one.
    from chalk_worker.judges.programs.builds import build_key

    work = tmp_path / "work"
    work.mkdir(mode=0o1777)
    work.chmod(0o1777)
    wrong = "echo 0\n# planted " + uuid.uuid4().hex
    chain = languages.toolchains().found["bash"]
    assert chain.spec.compile is not None
    parts = [chain.spec.name, chain.version, *chain.spec.compile, "main.sh"]
    key = build_key(parts, (wrong + "\n").encode())  # the code block, as the judge reads it
    planted = work / "chalk-builds" / key
    planted.mkdir(parents=True)
    (planted / "main.sh").write_text(PROGRAMS["bash"]["ac"])
    for folder in (planted.parent, planted):
        os.chown(folder, 65534, 65534)
        folder.chmod(0o777)
    monkeypatch.setenv("CHALK_WORK_DIR", str(work))
    result = score_job(job_of(wrong, "bash", language="bash"))
    assert verdicts(result) == [WA, WA]
    assert result.scoring is not None and result.scoring.compile is not None
    assert not result.scoring.compile.cached
