"""The code passes ruff's pyflakes rules (pyproject's [tool.ruff]): an unused or undefined name is a bug or a
leftover. ruff is pinned in the test extra and constraints.txt, so CI runs this in its fresh venv."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise",
                             "bertkit", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
