"""Pre-training's losses are a snapshot: the values below were logged by the code before pre-training ran through
train/fit.py's fit (bertkit 9abaf90, where pretrain/job.py and generate/pretrain_job.py called the loop themselves).
A change that draws the masks, the sampled replacements, the factorization orders or the batch order differently
moves them by far more than the tolerance (1e-4; a different CPU's float rounding moves them by ~1e-6)."""
import json

import pytest

from bertkit.cli import main
from test_job import TINY

STEPS = 12
# objective -> (losses of steps 1, 4, 7, 10; the held-out loss at step 12)
SNAPSHOT = {
    "mlm": ([3.926621, 3.90927, 3.845851, 3.84275], 3.818364),
    "mlm+nsp": ([4.652474, 4.609789, 4.555268, 4.509057], 3.835689),
    # electra since h/electra: the generator's tokens sampled by inverse CDF (model/electra.replace_masked)
    "electra": ([38.565323, 38.277599, 37.912586, 37.601372], 37.455818),
    "mlm+sbo": ([7.814125, 7.748302, 7.74428, 7.629026], 3.811724),
    # plm since h/electra: rows framed A [SEP] [CLS] with left padding, as the saved XLNet folder frames a text
    "plm": ([3.97134, 3.927054, 3.839329, 3.8179], 3.816381),
    "gpt": ([5.7133, 5.652423, 5.557048, 5.516653], 5.510917),
}
GPT_SENTENCES = ["the cat sat on the mat.", "the dog sat on the log.", "a cat and a dog met on a mat.",
                 "the big dog ran to the small cat.", "a red log lay on the blue mat."]
GPT_TINY = ["--encoder.hidden_size=32", "--encoder.num_layers=1", "--encoder.num_heads=2",
            "--encoder.max_position_embeddings=32", "--data.block_size=16", "--data.batch_size=4",
            "--data.heldout_fraction=0.1", "--vocab.min_frequency=1", "--train.progress_bar=false"]


def command(objective, corpus, vocab_dir, tmp_path):
    if objective == "gpt":
        corpus = tmp_path / "gpt.txt"
        docs = ["\n".join(GPT_SENTENCES[(i + j) % 5] for j in range(3)) for i in range(20)]
        corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
        return ["pretrain", "--arch", "gpt", "--corpus", str(corpus), *GPT_TINY]
    return ["pretrain", "--config", "tiny", "--corpus", str(corpus), "--vocab", str(vocab_dir), "--objective",
            objective, *TINY]


@pytest.mark.parametrize("objective", list(SNAPSHOT))
def test_losses_match_the_snapshot_taken_before_fit(tmp_path, corpus, vocab_dir, objective):
    out = tmp_path / "out"
    assert main([*command(objective, corpus, vocab_dir, tmp_path), "--output", str(out), "--max-steps", str(STEPS),
                 "--train.save_every=6", "--train.eval_every=5"]) == 0
    records = [json.loads(line) for line in (out / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "lr" in r]
    evaluations = [r["eval"] for r in records if "eval" in r]
    expected, heldout = SNAPSHOT[objective]
    assert len(losses) == STEPS and losses[::3] == pytest.approx(expected, abs=1e-4)
    assert evaluations[-1]["loss"] == pytest.approx(heldout, abs=1e-4)
    assert json.loads((out / "metrics.json").read_text())["dev"] == evaluations[-1]   # fit's record of the run
    assert not (out / "run" / "checkpoint").exists() and not (out / "shards").exists()   # finished: no resume state
