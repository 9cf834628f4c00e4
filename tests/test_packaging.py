"""What a `pip install .` (not -e) user gets: the wheel carries the package data the code reads."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_wheel_ships_the_presets_and_they_resolve_by_name(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(ROOT / "bertkit", source / "bertkit", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    wheel, = (tmp_path / "dist").glob("bertkit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    presets = {Path(n).stem for n in names if n.startswith("bertkit/presets/pretrain/") and n.endswith(".toml")}
    assert {"tiny", "tiny-zh", "gpt-tiny"} <= presets

    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    probe = ("from bertkit.config import find_config, load_config; from bertkit.pretrain.config import "
             "PretrainConfig; p = find_config('tiny-zh', 'pretrain'); "
             "print(p); print(load_config(PretrainConfig, p).data.segmenter)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed)}, timeout=120).stdout.split()
    assert Path(out[0]).is_relative_to(installed) and out[1] == "jieba"
