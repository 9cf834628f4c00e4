"""The README's install-and-test command, .ci/run and constraints.txt must agree: CI runs exactly the README's
line, and every package that line can install is pinned, so a fresh machine resolves the same versions."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)[:2]


def name_of(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("==", 1) for line in lines if line and not line.startswith("#")]
    return {name_of(name): version for name, version in pairs}


def test_ci_runs_exactly_the_readme_test_command():
    quickstart, tests = readme_commands()
    assert quickstart.endswith("bertkit quickstart") and tests.endswith("python -m pytest")
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci_lines[-1] == tests
    assert any(line.startswith("python3 -m venv") for line in ci_lines), "CI must build a fresh environment"


def test_readme_installs_use_the_constraints_file():
    for command in readme_commands():
        assert "-c constraints.txt" in command, command


def test_every_dependency_and_extra_is_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted += extra
    pinned = pins()
    missing = sorted({name_of(r) for r in wanted if "python_version < '3.11'" not in r} - set(pinned))
    assert not missing, f"constraints.txt lacks {missing}"
    assert pinned["torch"] == "2.13.0"
    assert pinned["pytest"] == "9.0.3"      # schemathesis' plugin fails under pytest 9.2.0
