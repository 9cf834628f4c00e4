"""A run folder from elsewhere (a colleague's, a shared disk) is untrusted: a link in it must not make a run write,
append or delete outside it, a record a crash cut short must not stop a resumed run, and a tampered training state
gets a one-line error, not a traceback."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from bertkit.errors import BertkitError, BertkitWarning, CheckpointError
from bertkit.job_config import TrainConfig
from bertkit.train.checkpointing import load_state, save_state, state_path
from bertkit.train.fit import Job, fit
from bertkit.train.log import JsonlLog, read_log
from train_toy import ToyModel, toy_batches, toy_loss


@dataclass
class ToyConfig:
    output: str = ""
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=3e-3, epochs=2, seed=5, progress_bar=False,
                                                                   save_every=2))


def _fit(output, resume: bool = False):
    config = ToyConfig(output=str(output))
    config.train.resume = resume
    return fit(config, lambda: Job(ToyModel(), toy_loss, toy_batches(), lambda model, metrics: None))


def _victim(tmp_path):
    victim = tmp_path / "victim"
    (victim / "checkpoint").mkdir(parents=True)
    (victim / "checkpoint" / "important.txt").write_text("precious")
    return victim


def test_a_run_folder_that_is_a_link_is_refused_and_what_it_points_at_is_untouched(tmp_path):
    victim, output = _victim(tmp_path), tmp_path / "out"
    output.mkdir()
    (output / "run").symlink_to(victim)
    with pytest.raises(BertkitError, match=r"out/run is a symbolic link"):
        _fit(output)
    assert sorted(p.name for p in victim.rglob("*")) == ["checkpoint", "important.txt"]


@pytest.mark.parametrize("name", ["log.jsonl", "checkpoint", "config.effective.json"])
def test_a_link_inside_the_run_folder_is_refused(tmp_path, name):
    victim, output = _victim(tmp_path), tmp_path / "out"
    (output / "run").mkdir(parents=True)
    (output / "run" / name).symlink_to(victim / "checkpoint" / "important.txt" if name != "checkpoint"
                                      else victim / "checkpoint")
    with pytest.raises(BertkitError, match=rf"run/{name} is a symbolic link"):
        _fit(output)
    assert (victim / "checkpoint" / "important.txt").read_text() == "precious"


def test_the_log_is_never_appended_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "log.jsonl").symlink_to(victim)
    with pytest.raises(BertkitError, match="cannot append the run log"):
        JsonlLog(tmp_path / "run")
    assert victim.read_text() == "precious\n"


def test_a_record_cut_short_by_a_crash_is_skipped_and_the_resumed_log_starts_a_new_line(tmp_path):
    log = JsonlLog(tmp_path)
    log.write({"step": 1, "loss": 2.0})
    log.close()
    with (tmp_path / "log.jsonl").open("a") as handle:
        handle.write('{"step": 2, "lo')                 # kill -9 mid-write
    resumed = JsonlLog(tmp_path)
    resumed.write({"step": 2, "loss": 1.5})
    resumed.close()
    with pytest.warns(BertkitWarning, match=r"log.jsonl:2: skipped 1 line"):
        assert read_log(tmp_path / "log.jsonl") == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]


class Crash(Exception):
    pass


def _crashed_run(output):
    """A run that dies after its state at step 2 was saved (save_every=2), as --resume finds it."""
    def evaluate(model):
        raise Crash
    config = ToyConfig(output=str(output))
    config.train.eval_every = 3
    with pytest.raises(Crash):
        fit(config, lambda: Job(ToyModel(), toy_loss, toy_batches(), lambda model, metrics: None, evaluate, "loss"))
    assert load_state(state_path(output / "run"))["schedule"]["step"] == 2


def test_a_resumed_run_with_a_torn_log_finishes(tmp_path):
    _crashed_run(tmp_path)
    with (tmp_path / "run" / "log.jsonl").open("a") as handle:
        handle.write('{"step": 3, "lo')
    with pytest.warns(BertkitWarning, match="skipped 1 line"):
        result = _fit(tmp_path, resume=True)
    assert result.steps == len(toy_batches()) * 2 and (tmp_path / "metrics.json").is_file()
    assert not (tmp_path / "run" / "checkpoint").exists()


@pytest.mark.parametrize("tamper", [
    lambda s: s["schedule"].update(step="x"),
    lambda s: s["data"].update(position=10 ** 12),
    lambda s: s["data"].update(position=-5),
    lambda s: s.update(model={}),
    lambda s: s.pop("rng"),
])
def test_a_tampered_training_state_gets_a_one_line_error(tmp_path, tamper):
    _crashed_run(tmp_path)
    path = state_path(tmp_path / "run")
    state = load_state(path)
    tamper(state)
    save_state(path, state)
    with pytest.raises(CheckpointError, match=r"training_state.safetensors: the training state does not fit"):
        _fit(tmp_path, resume=True)
