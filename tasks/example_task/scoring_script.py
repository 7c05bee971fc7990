"""Scores 1 when the submitted answer names Python 3.12.11.

Run as ``{python} -m tasks.example_task.scoring_script SUBMISSION OUTPUT``.
A student who never wrote the answer file scores 0 with ``missing`` in the
metadata: the script checks, rather than crash, so that a crash (a grader
error) always means a problem of the grader's.
"""

import json
import sys
from pathlib import Path

if __name__ == "__main__":
    submission_path, output_path = sys.argv[1], sys.argv[2]
    submission = Path(submission_path)

    if not submission.is_file():
        verdict = {"score": 0.0, "metadata": {"missing": submission.name}}
    else:
        answer = submission.read_text(errors="replace").strip()
        verdict = {"score": 1.0 if "3.12.11" in answer else 0.0, "metadata": {}}

    Path(output_path).write_text(json.dumps(verdict))
