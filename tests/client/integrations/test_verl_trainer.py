"""The verl page's configuration, as verl's own trainer reads it and its reward loop runs it.

The YAML file and the command line are taken from the docs' verl page
(``docs/integrations/verl.md``) as written there; ``bench.verl_loop`` composes
them with verl's own trainer config (``ppo_trainer``, by Hydra, as
``verl.trainer.main_ppo`` does), asks verl's loader which function it returns,
and scores a small batch through verl's ``RewardLoopManager`` on a local Ray (in
a process of its own). So the docs cannot drift from verl again. Needs verl
installed without its GPU stack (as ``.ci/run`` does): ``pip install --no-deps
"verl==0.9.1" && pip install -r tests/client/integrations/verl-requirements.txt``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from processes import need

ROOT = Path(__file__).resolve().parents[3]
CHALK_FUNCTION = "chalk_client.integrations.verl:compute_score_async"

TESTS = """\
def test_small():
    assert add(1, 2) == 3

def test_negative():
    assert add(-1, 1) == 0
"""
ROWS = [
    {"response": "Here:\n```python\ndef add(a, b):\n    return a + b\n```", "ground_truth": TESTS},
    {"response": "```python\ndef add(a, b):\n    return a - b\n```", "ground_truth": TESTS},
    {"response": "```python\ndef add(a, b):\n    return abs(a) + b\n```", "ground_truth": TESTS},
    {"response": "I cannot write that.", "ground_truth": TESTS},
]
"""Right, wrong, half right, no code: the page's judge runs the row's tests."""
EXPECTED = [1.0, 0.0, 0.5, 0.0]

pytestmark = pytest.mark.slow


VERL_PAGE = ROOT / "docs" / "integrations" / "verl.md"


def verl_section() -> str:
    """The page's part on verl 0.7 and later: up to its section on older verl."""
    page = VERL_PAGE.read_text()
    match = re.search(r"^## verl 0\.7 and later\n(.*?)^## verl 0\.6 and older", page, re.S | re.M)
    assert match, f"{VERL_PAGE.name} has no '## verl 0.7 and later' section before '## verl 0.6'"
    return match.group(1)


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def page_yaml() -> str:
    """The page's config file for verl 0.7 and later: the first YAML block naming verl's."""
    blocks = [b for b in code_blocks(verl_section(), "yaml") if "ppo_trainer" in b]
    assert blocks, "the verl page has no YAML config extending ppo_trainer"
    return blocks[0]


def page_overrides() -> list[str]:
    """The overrides of the page's ``main_ppo`` command line, as the shell would pass them."""
    for block in code_blocks(verl_section(), "sh"):
        words = shlex.split(block.replace("\\\n", " "), comments=True)
        if "verl.trainer.main_ppo" in words:
            after = words[words.index("verl.trainer.main_ppo") + 1 :]
            return [word for word in after if "=" in word and not word.startswith("-")]
    raise AssertionError("the verl page has no 'python3 -m verl.trainer.main_ppo'")


def run_verl(
    tmp_path: Path, *overrides: str, config: Path | None = None, rounds: int = 0
) -> dict[str, Any]:
    """``bench.verl_loop`` in a process of its own: what verl loaded (and scored)."""
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(ROWS))
    argv = [sys.executable, "-m", "bench.verl_loop", f"--rounds={rounds}"]
    argv += [f"--config-file={config}"] if config else []
    argv += [str(rows), *overrides]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture(scope="module", autouse=True)
def verl_installed() -> None:
    for module in ("verl", "hydra", "ray", "torch", "tensordict", "transformers"):
        if importlib.util.find_spec(module) is None:
            need(f"{module} (pip install -r tests/client/integrations/verl-requirements.txt)")


def test_verl_s_reward_loop_scores_with_the_page_s_yaml(tmp_path: Path) -> None:
    config = tmp_path / "chalk_ppo.yaml"
    config.write_text(page_yaml())
    found = run_verl(tmp_path, config=config, rounds=1)
    assert found["function"] == CHALK_FUNCTION
    assert found["manager"] == "NaiveRewardManager"
    assert found["scores"] == EXPECTED


def test_the_page_s_command_line_loads_the_same_function_and_options(tmp_path: Path) -> None:
    config = tmp_path / "chalk_ppo.yaml"
    config.write_text(page_yaml())
    from_file = run_verl(tmp_path, config=config)
    from_line = run_verl(tmp_path, *page_overrides())
    assert from_line["function"] == CHALK_FUNCTION
    assert from_line["custom_reward_function"] == from_file["custom_reward_function"]


def test_verl_ignores_the_top_level_place_older_verl_read(tmp_path: Path) -> None:
    # The page says so: verl 0.9 reads reward.custom_reward_function only.
    old = tmp_path / "old_place.yaml"
    text = page_yaml()
    head, body = text.split("\nreward:\n", 1)
    old.write_text(f"{head}\n{textwrap.dedent(body)}")
    assert "\ncustom_reward_function:\n  path: pkg://chalk_client" in old.read_text()
    found = run_verl(tmp_path, config=old)
    assert found["function"] == ""
