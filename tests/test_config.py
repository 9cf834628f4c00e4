from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from bertkit.config import apply_overrides, load_config, save_config
from bertkit.errors import ConfigError
from bertkit.model.config import EncoderConfig


@dataclass
class Optim:
    lr: float = 1e-4
    schedule: Literal["linear", "cosine"] = "linear"


@dataclass
class Job:
    name: str = "run"
    steps: int = 10
    layers: list[int] = field(default_factory=lambda: [1, 2])
    seed: Optional[int] = None
    fast: bool = False
    optim: Optim = field(default_factory=Optim)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)


def test_toml_then_overrides(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('steps = 20\n[optim]\nlr = 3e-5\n', encoding="utf-8")
    config = load_config(Job, path, ["--optim.schedule=cosine", "--fast=true", "--layers=4,5", "--seed=7"])
    assert (config.steps, config.optim.lr, config.optim.schedule, config.fast, config.layers, config.seed) == (
        20, 3e-5, "cosine", True, [4, 5], 7)
    saved = save_config(config, tmp_path / "run")
    assert '"lr": 3e-05' in saved.read_text()


def test_section_overrides_are_checked_together():
    config = apply_overrides(Job(), ["--encoder.hidden_size=64", "--encoder.num_heads=4"])
    assert config.encoder.hidden_size == 64
    with pytest.raises(ConfigError, match="encoder: hidden_size 70 is not divisible"):
        apply_overrides(Job(), ["--encoder.hidden_size=70"])


@pytest.mark.parametrize("override,message", [
    ("--stepz=3", "unknown key stepz; valid keys here: encoder, fast, layers, name, optim, seed, steps"),
    ("--steps=many", "steps: expected an integer"),
    ("--optim.schedule=exp", "not one of"),
    ("--fast=perhaps", "expected true/false"),
    ("steps", "must look like"),
])
def test_bad_overrides(override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(Job(), [override])


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Job, tmp_path / "none.toml")
    with pytest.raises(ConfigError, match="is not a regular file"):       # said "does not exist"
        load_config(Job, tmp_path)
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="binary.toml: not UTF-8 text"):
        load_config(Job, tmp_path / "binary.toml")
    (tmp_path / "bad.toml").write_text("steps = [", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(Job, tmp_path / "bad.toml")
    (tmp_path / "unknown.toml").write_text("[optim]\nmomentum = 0.9\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key optim.momentum"):
        load_config(Job, tmp_path / "unknown.toml")


def test_presets_resolve_by_name_from_the_package():
    """`--config tiny-zh` failed outside a checkout: presets were a repo folder, not package data (issue 17)."""
    import tomllib
    from importlib import resources

    from bertkit.config import find_config
    from bertkit.pretrain.config import PretrainConfig

    path = find_config("tiny-zh", "pretrain")
    assert path == resources.files("bertkit") / "presets" / "pretrain" / "tiny-zh.toml"
    assert find_config("tiny-zh.toml", "pretrain") == path
    expected = tomllib.loads(path.read_text(encoding="utf-8"))
    config = load_config(PretrainConfig, path)
    assert (config.encoder.hidden_size, config.data.segmenter, config.vocab.vocab_size) == (
        expected["encoder"]["hidden_size"], expected["data"]["segmenter"], expected["vocab"]["vocab_size"])


def test_missing_config_file_is_not_replaced_by_a_preset(tmp_path):
    from bertkit.config import find_config

    with pytest.raises(ConfigError, match=r"configs/pretrain/tiny.toml: no such file.*did you mean --config tiny\?"):
        find_config("configs/pretrain/tiny.toml", "pretrain")
    with pytest.raises(ConfigError, match="shipped with bertkit: base, base-zh, gpt-tiny, large, tiny, tiny-zh"):
        find_config("tiny-jp", "pretrain")
    own = tmp_path / "tiny"
    own.write_text("[train]\nlr = 0.5\n", encoding="utf-8")
    assert find_config(str(own), "pretrain") == own   # an existing file wins over a preset's name


def test_a_config_naming_a_folder_says_so_and_a_preset_name_still_wins(tmp_path, monkeypatch):
    from bertkit.config import find_config

    with pytest.raises(ConfigError, match=r"--config .*: not a regular file \(a folder or a device\)"):
        find_config(str(tmp_path), "pretrain")                           # said "no such file"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()                                         # a folder named like a preset
    assert find_config("tiny", "pretrain").name == "tiny.toml"
