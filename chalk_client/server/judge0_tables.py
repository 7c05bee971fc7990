"""Judge0 CE's numbers, as its clients know them: language ids, status ids, the config.

Language ids are Judge0 CE 1.13.1's for the languages Chalk runs (several ids
name one language: Judge0 kept one per compiler version; here each runs this
worker's toolchain). Status ids and descriptions are Judge0's own.
"""

from __future__ import annotations

from typing import Any

from chalk_client.program_tests import LANGUAGES

JUDGE0_VERSION = "1.13.1"
"""The Judge0 CE version whose ids these are (the ``judge0`` client maps aliases by it)."""

LANGUAGE_IDS: dict[int, tuple[str, str]] = {
    46: ("bash", "Bash"),
    48: ("c", "C (GCC)"),
    49: ("c", "C (GCC)"),
    50: ("c", "C (GCC)"),
    75: ("c", "C (Clang id; runs GCC)"),
    52: ("cpp", "C++ (GCC)"),
    53: ("cpp", "C++ (GCC)"),
    54: ("cpp", "C++ (GCC)"),
    76: ("cpp", "C++ (Clang id; runs GCC)"),
    60: ("go", "Go"),
    95: ("go", "Go"),
    62: ("java", "Java (OpenJDK)"),
    91: ("java", "Java (OpenJDK)"),
    63: ("javascript", "JavaScript (Node.js)"),
    93: ("javascript", "JavaScript (Node.js)"),
    71: ("python", "Python (3)"),
    92: ("python", "Python (3)"),
    73: ("rust", "Rust"),
}
"""Judge0 language id: (the language Chalk runs, its name in ``GET /languages``)."""

assert {language for language, _ in LANGUAGE_IDS.values()} == set(LANGUAGES)

STATUSES: dict[int, str] = {
    1: "In Queue",
    2: "Processing",
    3: "Accepted",
    4: "Wrong Answer",
    5: "Time Limit Exceeded",
    6: "Compilation Error",
    7: "Runtime Error (SIGSEGV)",
    8: "Runtime Error (SIGXFSZ)",
    9: "Runtime Error (SIGFPE)",
    10: "Runtime Error (SIGABRT)",
    11: "Runtime Error (NZEC)",
    12: "Runtime Error (Other)",
    13: "Internal Error",
    14: "Exec Format Error",
}
"""Judge0's submission statuses."""

DEFAULT_CPU_TIME_LIMIT = 5.0
DEFAULT_WALL_TIME_LIMIT = 10.0
DEFAULT_MEMORY_LIMIT_KB = 256_000
MAX_BATCH = 20
"""Submissions in one ``POST /submissions/batch``, as Judge0's default."""


def languages() -> list[dict[str, Any]]:
    """``GET /languages``: the ids this server runs, in id order."""
    return [{"id": i, "name": name} for i, (_, name) in sorted(LANGUAGE_IDS.items())]


def statuses() -> list[dict[str, Any]]:
    """``GET /statuses``."""
    return [{"id": i, "description": text} for i, text in STATUSES.items()]


def config_info(max_time_s: float, max_memory_mb: int, max_wait_s: float) -> dict[str, Any]:
    """``GET /config_info``: Judge0's configuration fields, as this server applies them."""
    return {
        "maintenance_mode": False,
        "enable_wait_result": True,
        "enable_compiler_options": False,
        "allowed_languages_for_compile_options": [],
        "enable_command_line_arguments": False,
        "enable_submission_delete": False,
        "enable_callbacks": False,
        "callbacks_max_tries": 0,
        "callbacks_timeout": 0.0,
        "enable_additional_files": False,
        "max_queue_size": 0,
        "cpu_time_limit": DEFAULT_CPU_TIME_LIMIT,
        "max_cpu_time_limit": max_time_s,
        "cpu_extra_time": 0.0,
        "max_cpu_extra_time": 0.0,
        "wall_time_limit": DEFAULT_WALL_TIME_LIMIT,
        "max_wall_time_limit": max_time_s,
        "memory_limit": DEFAULT_MEMORY_LIMIT_KB,
        "max_memory_limit": max_memory_mb * 1024,
        "stack_limit": 0,
        "max_stack_limit": 0,
        "max_processes_and_or_threads": 0,
        "max_max_processes_and_or_threads": 0,
        "enable_per_process_and_thread_time_limit": False,
        "allow_enable_per_process_and_thread_time_limit": False,
        "enable_per_process_and_thread_memory_limit": False,
        "allow_enable_per_process_and_thread_memory_limit": False,
        "max_file_size": 0,
        "max_max_file_size": 0,
        "number_of_runs": 1,
        "max_number_of_runs": 1,
        "redirect_stderr_to_stdout": False,
        "max_extract_size": 0,
        "enable_batched_submissions": True,
        "max_submission_batch_size": MAX_BATCH,
        "submission_cache_duration": 0.0,
        "use_docs_as_homepage": False,
        "enable_network": False,
        "allow_enable_network": False,
        "max_wait_s": max_wait_s,
    }
