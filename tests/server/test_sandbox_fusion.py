"""SandboxFusion's clients, unchanged, against ``chalk serve``'s ``/run_code``.

The ``sandbox-fusion`` package from PyPI and verl's own sandbox reward code
post to a real ``chalk serve`` (embedded queue) and must read what they expect.
"""

from __future__ import annotations

import importlib.util

import httpx
import pytest
from sandbox_fusion import RunCodeRequest, RunStatus, run_code
from sandbox_fusion.models import CommandRunStatus
from servers import Server

pytestmark = pytest.mark.slow


def test_the_sandbox_fusion_client_runs_python_on_its_stdin(server: Server) -> None:
    answer = run_code(
        RunCodeRequest(code="print(int(input()) * 2)", stdin="21\n", language="python"),
        endpoint=server.url,
    )
    assert answer.status == RunStatus.Success
    assert answer.run_result is not None
    assert answer.run_result.status == CommandRunStatus.Finished
    assert answer.run_result.return_code == 0
    assert answer.run_result.stdout == "42\n"
    assert answer.run_result.execution_time is not None


def test_cpp_compiles_then_runs(server: Server) -> None:
    code = '#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}'
    answer = run_code(RunCodeRequest(code=code, stdin="2 3", language="cpp"), endpoint=server.url)
    assert answer.status == RunStatus.Success, answer
    assert answer.compile_result is not None
    assert answer.compile_result.return_code == 0
    assert answer.run_result is not None and answer.run_result.stdout == "5\n"


def test_a_compile_error_fails_with_the_compilers_words_and_no_run(server: Server) -> None:
    answer = run_code(
        RunCodeRequest(code="int main( { return 0; }", language="cpp"), endpoint=server.url
    )
    assert answer.status == RunStatus.Failed
    assert answer.run_result is None
    assert answer.compile_result is not None
    assert answer.compile_result.return_code != 0
    assert "error" in (answer.compile_result.stderr or "")


def test_a_crash_is_failed_with_its_exit_status_and_stderr(server: Server) -> None:
    code = "import sys\nprint('partial')\nsys.stderr.write('boom')\nsys.exit(3)"
    answer = run_code(RunCodeRequest(code=code, language="python"), endpoint=server.url)
    assert answer.status == RunStatus.Failed
    assert answer.run_result is not None
    assert answer.run_result.status == CommandRunStatus.Finished
    assert answer.run_result.return_code == 3
    assert answer.run_result.stdout == "partial\n"
    assert "boom" in (answer.run_result.stderr or "")


def test_a_program_past_its_run_timeout_is_a_time_limit_within_about_that_time(
    server: Server,
) -> None:
    for code in ("while True: pass", "import time\ntime.sleep(60)"):
        answer = run_code(
            RunCodeRequest(code=code, language="python", run_timeout=1), endpoint=server.url
        )
        assert answer.status == RunStatus.Failed
        assert answer.run_result is not None
        assert answer.run_result.status == CommandRunStatus.TimeLimitExceeded
        assert (answer.run_result.execution_time or 0) < 5


def test_verls_posts_are_read_as_sent_memory_limit_included(server: Server) -> None:
    # verl posts this body itself (no client library), to the full /run_code URL.
    body = {
        "compile_timeout": 10,
        "run_timeout": 10,
        "code": "print(input()[::-1])",
        "stdin": "abc\n",
        "memory_limit_MB": 1024,
        "language": "python",
        "files": {},
        "fetch_files": [],
    }
    answer = httpx.post(f"{server.url}/run_code", json=body, timeout=60).json()
    assert answer["status"] == "Success"
    assert answer["run_result"]["stdout"] == "cba\n"


def test_a_language_chalk_does_not_run_is_a_clear_422(server: Server) -> None:
    answer = httpx.post(
        f"{server.url}/run_code", json={"code": "puts 1", "language": "ruby"}, timeout=30
    )
    assert answer.status_code == 422
    assert "ruby" in answer.json()["detail"]


@pytest.mark.skipif(
    importlib.util.find_spec("verl") is None, reason="verl is installed by CI (without its GPUs)"
)
def test_verls_own_sandbox_reward_scores_against_chalk(server: Server) -> None:
    from verl.utils.reward_score.sandbox_fusion import compute_score

    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    wrong = "```python\nprint(0)\n```"
    tests = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
    url = f"{server.url}/run_code"
    score, details = compute_score(url, None, 1024, right, tests)
    assert score == 1.0, details
    score, details = compute_score(url, None, 1024, wrong, tests)
    assert score == 0.0
    assert details[0]["status"] == "wrong_answer", details
