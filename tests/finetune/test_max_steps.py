"""finetune --max-steps N: the run ends after exactly N optimizer steps and the lr schedule spans those N steps
(linear: the lr of step k is peak x (1 - k/N), so the next step's would be 0), whatever --epochs says."""
from __future__ import annotations

import json

import pytest

from bertkit.job_config import job_config
from bertkit.errors import BertkitError
from bertkit.finetune import FinetuneConfig, run_finetune
from bertkit.train.optim import Schedule



def write_rows(path, count: int):
    words = ("good", "bad")
    path.write_text("".join(json.dumps({"text": f"the {words[i % 2]} movie", "label": words[i % 2]}) + "\n"
                            for i in range(count)), encoding="utf-8")
    return path


@pytest.mark.parametrize("epochs", [None, 50])
def test_max_steps_ends_the_run_and_the_linear_schedule(finetune_model_dir, tmp_path, monkeypatch, epochs):
    applied = []
    real_apply = Schedule.apply

    def recording_apply(self, optimizer):
        applied.append((self.step, real_apply(self, optimizer)))
        return applied[-1][1]

    monkeypatch.setattr(Schedule, "apply", recording_apply)
    train = write_rows(tmp_path / "train.jsonl", 64)    # 8 batches an epoch: more than 3
    result = run_finetune(job_config(FinetuneConfig, model=str(finetune_model_dir), train=str(train), output=str(tmp_path / "m"),
                                         max_steps=3, epochs=epochs, warmup_ratio=0.0, lr=1e-3, batch_size=8,
                                         progress_bar=False, baseline=False))
    assert [step for step, _ in applied] == [0, 1, 2]
    assert [lr for _, lr in applied] == pytest.approx([1e-3, 1e-3 * 2 / 3, 1e-3 / 3])
    assert result.steps == 3 and result.stop_reason == "max_steps" and len(result.loop.losses) == 3
    metrics = json.loads((result.output / "metrics.json").read_text())
    assert metrics["steps"] == 3
    log = [json.loads(line) for line in (result.output / "run" / "log.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in log if "step" in r) <= 3
    recipe = json.loads((result.output / "run" / "recipe.json").read_text())
    assert recipe["time_budget"] is None                       # no default 30m cap: the steps set the length


def test_max_steps_below_one_is_one_line_error(finetune_model_dir, tmp_path):
    with pytest.raises(BertkitError, match="max_steps must be a number >= 1, got 0"):
        run_finetune(job_config(FinetuneConfig, model=str(finetune_model_dir), train="x.jsonl", output=str(tmp_path / "m"),
                                    max_steps=0))
