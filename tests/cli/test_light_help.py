"""`bertkit --help` and every `bertkit COMMAND --help` answer without importing torch (nor any job module): the
parser reads only bertkit.options, the configs (bertkit.finetune.config, bertkit.pretrain.config, bertkit.model.config,
bertkit.job_config: plain dataclasses the flags are generated from) and the command modules; a command's handler imports what it runs."""
from __future__ import annotations

import json
import subprocess
import sys

_HELP_EVERYTHING = r"""
import contextlib, io, json, sys
from bertkit.cli import build_parser, main

commands = sorted(build_parser()._subparsers._group_actions[0].choices)
for argv in [["--help"]] + [[name, "--help"] for name in commands]:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv)
        except SystemExit as exit:
            assert exit.code == 0, (argv, exit.code)
    assert "usage: bertkit" in out.getvalue(), argv
# the configs flags are generated from: plain dataclasses (the package bertkit.model re-exports lazily)
LIGHT_CONFIGS = {"bertkit.finetune.config", "bertkit.model", "bertkit.model.config"}
heavy = sorted(m for m in sys.modules if m == "torch" or m.startswith(("bertkit.model", "bertkit.finetune.",
               "bertkit.train", "bertkit.serve.server", "bertkit.api")) and m not in LIGHT_CONFIGS)
print(json.dumps({"commands": commands, "heavy": heavy}))
"""


def test_help_of_every_command_imports_no_torch():
    done = subprocess.run([sys.executable, "-c", _HELP_EVERYTHING], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"encode", "finetune", "serve", "index", "pretrain", "distill"} <= set(result["commands"])
    assert result["heavy"] == [], f"--help imported {result['heavy']}"
