import json
import os
import subprocess
import sys

import pytest

TINY_CONFIG = "tiny"   # a preset shipped with bertkit

ARGS = ["pretrain", "--config", TINY_CONFIG, "--max-steps", "20", "--objective", "mlm+nsp",
        "--encoder.hidden_size=32", "--encoder.intermediate_size=64", "--encoder.num_layers=1",
        "--encoder.max_position_embeddings=64", "--encoder.hidden_dropout=0", "--encoder.attention_dropout=0",
        "--data.max_length=32", "--train.progress_bar=false", "--train.lr=1e-3", "--data.heldout_fraction=0"]


def run(tmp_path, corpus, vocab_dir, nproc: int, batch_size: int) -> dict[int, float]:
    out = tmp_path / f"run{nproc}"
    args = [*ARGS, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--output", str(out),
            f"--data.batch_size={batch_size}"]
    launcher = [] if nproc == 1 else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd = [sys.executable, *launcher, "-m", "bertkit", *args]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "run" / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "lr" in r}


@pytest.mark.slow
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path, corpus, vocab_dir):
    single = run(tmp_path, corpus, vocab_dir, 1, 8)
    double = run(tmp_path, corpus, vocab_dir, 2, 4)
    assert sorted(single) == sorted(double) == list(range(1, 21))
    for step in single:
        assert double[step] == pytest.approx(single[step], abs=1e-4), step
