import json
import math

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.train import TrainConfig, train
from train_toy import ToyModel, toy_batches, toy_loss


def fresh_model():
    torch.manual_seed(0)
    return ToyModel()


def test_training_lowers_loss_and_writes_logs(tmp_path):
    config = TrainConfig(lr=3e-3, epochs=6, warmup_ratio=0.1, output_dir=str(tmp_path), progress_bar=False)
    result = train(fresh_model(), toy_loss, toy_batches(), config, evaluate=lambda m: {"loss": 0.0})
    assert result.stop_reason == "epochs" and result.steps == 48 and result.epochs == 6
    assert sum(result.losses[-8:]) < sum(result.losses[:8])
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "lr" in r]
    assert len(steps) == 48 and "tokens_per_s" in steps[0] and steps[0]["tokens"] == 64
    assert sum("eval" in r for r in records) == 6                       # once per epoch
    assert (tmp_path / "checkpoint" / "training_state.safetensors").is_file()
    assert (tmp_path / "loss.png").is_file()


def test_kill_and_resume_continues_the_same_curve(tmp_path):
    config = TrainConfig(lr=3e-3, max_steps=40, warmup_steps=4, save_every=10, progress_bar=False, seed=3)
    full = train(fresh_model(), toy_loss, toy_batches(), TrainConfig(**{**config.__dict__, "output_dir": str(tmp_path / "a")}))

    calls = {"n": 0}

    def dying_loss(model, batch):
        calls["n"] += 1
        if calls["n"] == 26:
            raise KeyboardInterrupt   # "killed" during step 26; the last checkpoint is step 20
        return toy_loss(model, batch)

    cut = TrainConfig(**{**config.__dict__, "output_dir": str(tmp_path / "b")})
    with pytest.raises(KeyboardInterrupt):
        train(fresh_model(), dying_loss, toy_batches(), cut)
    torch.manual_seed(123)    # a different process state: resume must not depend on it
    resumed = train(ToyModel(), toy_loss, toy_batches(), TrainConfig(**{**cut.__dict__, "resume": True}))
    assert resumed.steps == 40 and len(resumed.losses) == 20
    assert resumed.losses == pytest.approx(full.losses[20:], abs=1e-5)


def test_a_new_run_into_an_old_folder_starts_its_own_log_and_keeps_the_old_one(tmp_path):
    def steps_logged(path):
        return [json.loads(line)["step"] for line in path.read_text().splitlines() if '"lr"' in line]

    def config(steps, **more):
        return TrainConfig(lr=3e-3, max_steps=steps, save_every=5, output_dir=str(tmp_path), progress_bar=False,
                           **more)

    train(fresh_model(), toy_loss, toy_batches(), config(6))
    first = (tmp_path / "log.jsonl").read_text()
    train(fresh_model(), toy_loss, toy_batches(), config(4))
    assert (tmp_path / "log.1.jsonl").read_text() == first                 # the earlier run's record, untouched
    assert steps_logged(tmp_path / "log.jsonl") == [1, 2, 3, 4]             # this run's steps only, once each
    train(fresh_model(), toy_loss, toy_batches(), config(3))
    assert steps_logged(tmp_path / "log.2.jsonl") == [1, 2, 3, 4] and steps_logged(tmp_path / "log.jsonl") == [1, 2, 3]

    calls = {"n": 0}

    def dying_loss(model, batch):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt   # killed during step 8; the last training state is step 5
        return toy_loss(model, batch)

    with pytest.raises(KeyboardInterrupt):
        train(fresh_model(), dying_loss, toy_batches(), config(10))
    train(fresh_model(), toy_loss, toy_batches(), config(10, resume=True))  # a resumed run keeps its log
    assert steps_logged(tmp_path / "log.jsonl") == [1, 2, 3, 4, 5, 6, 7] + [6, 7, 8, 9, 10]
    assert not (tmp_path / "log.4.jsonl").exists()


def test_resume_without_state_is_a_clear_error(tmp_path):
    config = TrainConfig(max_steps=2, output_dir=str(tmp_path), resume=True, progress_bar=False)
    with pytest.raises(BertkitError, match="no training state"):
        train(fresh_model(), toy_loss, toy_batches(), config)


def test_non_finite_loss_rolls_back_and_lowers_lr(tmp_path, capsys):
    calls = {"n": 0}

    def flaky_loss(model, batch):
        calls["n"] += 1
        loss, metrics = toy_loss(model, batch)
        return (loss * float("nan") if calls["n"] == 7 else loss), metrics

    config = TrainConfig(lr=1e-3, max_steps=12, save_every=5, output_dir=str(tmp_path), progress_bar=False)
    result = train(fresh_model(), flaky_loss, toy_batches(), config)
    assert result.rollbacks == 1 and result.steps == 12 and all(math.isfinite(x) for x in result.losses)
    assert "rolled back to the checkpoint of step 5" in capsys.readouterr().err
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "rollback" and r["lr_scale"] == 0.5 for r in log)

    calls["n"] = 0
    with pytest.raises(BertkitError, match="no checkpoint to roll back to"):
        train(fresh_model(), flaky_loss, toy_batches(), TrainConfig(max_steps=12, progress_bar=False))


def test_best_callback_and_early_stopping():
    scores = iter([0.5, 0.7, 0.6, 0.65, 0.9])
    best = []
    config = TrainConfig(epochs=10, metric_for_best="accuracy", early_stopping_patience=2, progress_bar=False)
    result = train(fresh_model(), toy_loss, toy_batches(), config, evaluate=lambda m: {"accuracy": next(scores)},
                   on_best=lambda m, metrics: best.append(metrics["accuracy"]))
    assert best == [0.5, 0.7] and result.stop_reason == "early_stopping" and result.epochs == 4
    assert result.best_metric == 0.7


@pytest.mark.parametrize("tie_breaker, kept", [("loss", [0.9, 0.7]), (None, [0.9])])
def test_a_tie_in_the_metric_goes_to_the_lower_tie_breaker(tie_breaker, kept):
    # a 210-text dev set scores two epochs the same (BBC: 0.9905 twice); the lower dev loss then decides
    evals = iter([{"accuracy": 0.5, "loss": 0.9}, {"accuracy": 0.5, "loss": 0.7}, {"accuracy": 0.5, "loss": 0.8},
                  {"accuracy": 0.4, "loss": 0.1}])
    best = []
    config = TrainConfig(epochs=4, metric_for_best="accuracy", tie_breaker=tie_breaker, progress_bar=False)
    result = train(fresh_model(), toy_loss, toy_batches(), config, evaluate=lambda m: next(evals),
                   on_best=lambda m, metrics: best.append(metrics["loss"]))
    assert best == kept and result.best_eval["loss"] == kept[-1]


def test_a_tie_with_the_model_already_saved_keeps_that_model():
    # the saved model is known by its score alone, so an equal score never replaces it
    best = []
    config = TrainConfig(epochs=2, metric_for_best="accuracy", tie_breaker="loss", best_to_beat=0.5,
                         progress_bar=False)
    train(fresh_model(), toy_loss, toy_batches(), config, evaluate=lambda m: {"accuracy": 0.5, "loss": 0.1},
          on_best=lambda m, metrics: best.append(metrics))
    assert best == []


def test_grad_accum_and_epoch_callback():
    seen = []
    config = TrainConfig(epochs=2, grad_accum=4, progress_bar=False)
    result = train(fresh_model(), toy_loss, toy_batches(), config, on_epoch_start=lambda m, e: seen.append(e))
    assert result.steps == 4 and seen == [0, 1]


def test_time_budget_stops_the_run_and_drives_the_schedule():
    config = TrainConfig(time_budget="0.3s", progress_bar=False)
    result = train(fresh_model(), toy_loss, toy_batches(), config)
    assert result.stop_reason == "time_budget" and result.steps >= 1 and result.elapsed_s >= 0.3


def test_the_loop_says_how_far_the_clock_drove_the_schedule_ahead_of_the_steps():
    import time

    def slow_loss(model, batch):
        time.sleep(0.02)                               # at least 20 ms a step: at most 15 steps in 0.3 s
        return toy_loss(model, batch)

    behind = train(fresh_model(), slow_loss, toy_batches(), TrainConfig(max_steps=1000, time_budget="0.3s",
                                                                         progress_bar=False))
    assert behind.stop_reason == "time_budget" and behind.steps <= 15
    assert behind.clock_lead >= 1 - behind.steps / 1000 - 1e-9      # the clock finished the run; the steps did not
    ahead = train(fresh_model(), toy_loss, toy_batches(), TrainConfig(max_steps=10, time_budget="1h",
                                                                       progress_bar=False))
    assert ahead.stop_reason == "max_steps" and ahead.clock_lead == 0.0   # the steps led throughout
    assert train(fresh_model(), toy_loss, toy_batches(), TrainConfig(max_steps=5, progress_bar=False)).clock_lead == 0


@pytest.mark.parametrize("cpu_bf16", [False, True])
def test_cpu_bf16_autocasts_the_loss_only_when_asked(tmp_path, cpu_bf16):
    seen = []

    def loss_fn(model, batch):
        seen.append(torch.is_autocast_enabled("cpu"))
        return toy_loss(model, batch)

    config = TrainConfig(lr=3e-3, epochs=1, device="cpu", precision="bf16" if cpu_bf16 else "auto", output_dir=str(tmp_path),
                         progress_bar=False)
    result = train(fresh_model(), loss_fn, toy_batches(), config)
    assert seen and all(s == cpu_bf16 for s in seen) and all(math.isfinite(x) for x in result.losses)


def test_a_log_gets_progress_lines_not_a_bar(capsys, monkeypatch):
    """Where stderr is not a terminal (a log file, nohup, CI) the bar was still drawn: a wall of carriage returns,
    and with --no-progress nothing between evaluations. Now a plain line with the step, loss and time left."""
    from bertkit import progress
    from bertkit.train import loop

    monkeypatch.setattr(loop, "PROGRESS_LINE_S", 0.0)
    train(fresh_model(), toy_loss, toy_batches(), TrainConfig(lr=3e-3, max_steps=6))      # capsys: not a TTY
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("bertkit: step ")]
    assert "step/s]" not in err and "s/step]" not in err and len(lines) == 6, err      # no bar: its rate field
    assert lines[1].startswith("bertkit: step 2/6 (33%), loss ") and " s/step, about " in lines[1], lines[1]
    progress.configure(quiet=True)
    try:
        train(fresh_model(), toy_loss, toy_batches(), TrainConfig(lr=3e-3, max_steps=6))
    finally:
        progress.configure()
    assert "step " not in capsys.readouterr().err
