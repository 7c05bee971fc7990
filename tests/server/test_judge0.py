"""The ``judge0`` client from PyPI, unchanged but for its endpoint, against ``chalk serve``."""

from __future__ import annotations

import base64

import httpx
import judge0
import pytest
from judge0 import Client, LanguageAlias, Status, Submission
from servers import Server, ServerFactory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A server that wants a key, as a Judge0 Cloud client sends it (X-Auth-Token)."""
    factory = ServerFactory(tmp_path_factory.mktemp("judge0"))
    yield factory(key="judge0-test-key")
    factory.stop_all()


def _client(server: Server) -> Client:
    return Client(server.url, headers={"X-Auth-Token": server.key or ""})


def test_judge0_run_gives_the_programs_output_and_status(keyed: Server) -> None:
    client = _client(keyed)
    result = judge0.run(
        client=client,
        source_code="print(input()[::-1])",
        stdin="abc",
        language=LanguageAlias.PYTHON,
    )
    assert result.status == Status.ACCEPTED
    assert result.stdout == "cba\n"
    assert result.time is not None and result.memory is not None


def test_expected_output_is_judged_as_judge0_judges(keyed: Server) -> None:
    client = _client(keyed)
    code = "print(int(input()) + 1)"
    accepted = judge0.run(
        client=client,
        source_code=code,
        language=LanguageAlias.PYTHON,
        test_cases=[("1", "2  \n\n"), ("1", "3")],  # trailing spaces and lines do not count
    )
    assert [s.status for s in accepted] == [Status.ACCEPTED, Status.WRONG_ANSWER]


def test_every_language_by_its_judge0_alias(keyed: Server) -> None:
    client = _client(keyed)
    programs = {
        LanguageAlias.C: '#include <stdio.h>\nint main(){printf("hi\\n");}',
        LanguageAlias.CPP: '#include <cstdio>\nint main(){std::puts("hi");}',
        LanguageAlias.JAVA: (
            'public class Main{public static void main(String[] a){System.out.println("hi");}}'
        ),
        LanguageAlias.GO: 'package main\nimport "fmt"\nfunc main(){fmt.Println("hi")}',
        LanguageAlias.RUST: 'fn main(){println!("hi");}',
        LanguageAlias.JAVASCRIPT: 'console.log("hi")',
        LanguageAlias.BASH: "echo hi",
        LanguageAlias.PYTHON: "print('hi')",
    }
    submissions = [
        Submission(source_code=code, language=language) for language, code in programs.items()
    ]
    done = judge0.wait(
        client=client, submissions=judge0.async_run(client=client, submissions=submissions)
    )
    for language, submission in zip(programs, done, strict=True):
        assert submission.status == Status.ACCEPTED, (language, submission)
        assert submission.stdout == "hi\n", language


def test_compile_errors_runtime_errors_and_time_limits_have_judge0s_statuses(
    keyed: Server,
) -> None:
    client = _client(keyed)
    cases = [
        (Submission(source_code="int main( {", language=LanguageAlias.C), Status.COMPILATION_ERROR),
        (
            Submission(source_code="raise SystemExit(4)", language=LanguageAlias.PYTHON),
            Status.RUNTIME_ERROR_NZEC,
        ),
        (
            Submission(
                source_code="while True: pass", language=LanguageAlias.PYTHON, cpu_time_limit=1
            ),
            Status.TIME_LIMIT_EXCEEDED,
        ),
        (
            Submission(
                source_code="import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
                language=LanguageAlias.PYTHON,
            ),
            Status.RUNTIME_ERROR_SIGSEGV,
        ),
    ]
    done = judge0.wait(
        client=client,
        submissions=judge0.async_run(client=client, submissions=[c for c, _ in cases]),
    )
    for (_, status), submission in zip(cases, done, strict=True):
        assert submission.status == status, submission
    assert done[0].compile_output


def test_wait_true_and_base64_over_plain_http(keyed: Server) -> None:
    code = base64.b64encode(b"print('\\u00e9t\\u00e9')").decode()
    answer = httpx.post(
        f"{keyed.url}/submissions",
        params={"base64_encoded": "true", "wait": "true"},
        json={"source_code": code, "language_id": 71},
        headers={"X-Auth-Token": keyed.key or ""},
        timeout=60,
    )
    assert answer.status_code == 201
    body = answer.json()
    assert body["status"] == {"id": 3, "description": "Accepted"}
    assert base64.b64decode(body["stdout"]).decode() == "été\n"
    token = body["token"]
    again = httpx.get(
        f"{keyed.url}/submissions/{token}",
        params={"fields": "status,stdout,language_id"},
        headers={"X-Auth-Token": keyed.key or ""},
    ).json()
    assert again == {
        "status": {"id": 3, "description": "Accepted"},
        "stdout": "été\n",
        "language_id": 71,
    }


def test_judge0s_refusals_name_the_field(keyed: Server) -> None:
    headers = {"X-Auth-Token": keyed.key or ""}
    unknown = httpx.post(
        f"{keyed.url}/submissions", json={"source_code": "x", "language_id": 9999}, headers=headers
    )
    assert unknown.status_code == 422
    assert "language_id" in unknown.json()
    bad = httpx.post(
        f"{keyed.url}/submissions",
        params={"base64_encoded": "true"},
        json={"source_code": "%%%", "language_id": 71},
        headers=headers,
    )
    assert bad.status_code == 422 and "source_code" in bad.json()
    missing = httpx.get(f"{keyed.url}/submissions/no-such-token", headers=headers)
    assert missing.status_code == 404


def test_a_judge0_client_without_the_key_is_refused(keyed: Server) -> None:
    with pytest.raises(RuntimeError, match="Authentication failed"):
        Client(keyed.url, headers={"X-Auth-Token": "wrong"})
