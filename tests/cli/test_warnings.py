"""During a CLI command every warning is one line without a source path (issue 17: torch's and other libraries'
UserWarnings printed `/.../site-packages/torch/...py:218: UserWarning: ...` and the offending code line)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys, warnings
    import bertkit.cli as cli
    from bertkit.errors import BertkitWarning

    def command(argv):
        warnings.warn_explicit("The legacy exporter is deprecated.\\nSee https://example.org for details",
                               UserWarning, "/opt/venv/lib/python3.11/site-packages/torch/onnx/utils.py", 218)
        warnings.warn("3 of 9 texts were truncated; pass --long-texts sliding-window", BertkitWarning)
        return 0

    cli._run = command
    sys.exit(cli.main([]))
""")


def test_library_warnings_are_one_line_without_their_source_path():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "bertkit: warning: torch: UserWarning: The legacy exporter is deprecated.",
        "bertkit: warning: 3 of 9 texts were truncated; pass --long-texts sliding-window"]
