"""kill -9 in the middle of a run, then --resume, reproduces the uninterrupted run (issue 16), for each job that
trains through bertkit.train.fit: fine-tuning, distillation, SimCSE and seq2seq fine-tuning.

The interrupted run is a real process (kill_worker.py) killed with SIGKILL by this test once its log.jsonl shows
step KILL_AT; nothing in bertkit knows about the test. The resumed run must log the same loss at every logged
step and the same evaluations as an uninterrupted run with the same settings, end with the same weights, and leave
no training state behind.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.checkpoints import save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead, SequenceClassificationHead
from bertkit.tokenizer import Tokenizer
from bertkit.train.checkpointing import state_path
from bertkit.train.log import read_log
from kill_worker import run_job

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KILL_AT = 20                 # the parent kills the run once its log shows this step (logged every 10 steps)
WORDS = "the a movie film book was is good great fine nice bad awful poor sad sport match goal market bank".split()
LABELS = ["pos", "neg"]


def tokenizer() -> Tokenizer:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]
    return Tokenizer.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=True)


def model_folder(path: Path, head: str | None = None) -> str:
    """A tiny random BERT (2 layers, 32 wide, dropout on): plain, with an MLM head, or a fine-tuned classifier."""
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=tokenizer().vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    encoder = Encoder(config)
    heads, meta = {}, None
    if head == "mlm":
        heads["mlm"] = MaskedLMHead(config)
        heads["mlm"].apply(encoder._init_weights)
    elif head == "classifier":
        heads["classifier"] = SequenceClassificationHead(config, len(LABELS))
        meta = {"task": "classification", "labels": LABELS}
    save_checkpoint(path, encoder, tokenizer(), heads, meta)
    return str(path)


def rows(count: int, seed: int) -> list[dict]:
    good, bad = WORDS[7:11], WORDS[11:15]
    out = []
    for i in range(count):
        label = LABELS[(i * 7 + seed) % 2]
        words = good if label == "pos" else bad
        out.append({"text": f"the {WORDS[2 + (i + seed) % 3]} was {words[(i * 3 + seed) % 4]}", "label": label})
    return out


def write_jsonl(path: Path, items: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    return str(path)


def curve(output: Path) -> tuple[dict, dict]:
    """{step: loss} and {step: evaluation} from output/run/log.jsonl; a step logged again after a resume counts
    as its last record."""
    losses, evaluations = {}, {}
    for record in read_log(output / "run" / "log.jsonl"):
        if "loss" in record and "event" not in record:
            losses[record["step"]] = record["loss"]
        if "eval" in record:
            evaluations[record["step"]] = record["eval"]
    return losses, evaluations


def kill_and_resume(job: str, settings: dict, tmp_path: Path) -> None:
    full, killed = tmp_path / "full", tmp_path / "killed"
    run_job(job, {**settings, "output": str(full)})

    config_file = tmp_path / "killed.json"
    config_file.write_text(json.dumps({**settings, "output": str(killed)}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    stderr = tmp_path / "killed.stderr"
    with open(stderr, "wb") as err:
        process = subprocess.Popen([sys.executable, str(HERE / "kill_worker.py"), job, str(config_file)],
                                   stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tmp_path)
        log = killed / "run" / "log.jsonl"
        try:
            while process.poll() is None:
                try:     # a model save replaces the output folder; run/ (and the log) is back a moment later
                    steps = [r.get("step", 0) for r in read_log(log)]
                except FileNotFoundError:
                    steps = []
                if max(steps, default=0) >= KILL_AT:
                    os.kill(process.pid, signal.SIGKILL)
                    break
                time.sleep(0.002)
        finally:
            if process.poll() is None and process.returncode is None:
                process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL, \
        f"the run ended (exit {process.returncode}) before it was killed: {stderr.read_text()[-2000:]}"
    full_losses, full_evaluations = curve(full)
    assert max(curve(killed)[0]) < max(full_losses) - 20         # the kill fell in the middle of the run
    assert state_path(killed / "run").is_file()

    run_job(job, {**settings, "output": str(killed), "resume": True})
    losses, evaluations = curve(killed)
    assert losses == full_losses and evaluations == full_evaluations
    weights, full_weights = load_file(killed / "model.safetensors"), load_file(full / "model.safetensors")
    assert weights.keys() == full_weights.keys()
    assert all(torch.equal(weights[name], full_weights[name]) for name in weights)
    assert not (killed / "run" / "checkpoint").exists()         # a finished run leaves no training state
    steps = [json.loads((folder / "metrics.json").read_text())["steps"] for folder in (killed, full)]
    assert steps[0] == steps[1] >= max(full_losses)


@pytest.mark.slow
def test_finetune_resumes_after_kill_9(tmp_path):
    settings = dict(task="classification", model=model_folder(tmp_path / "base"),
                    train=write_jsonl(tmp_path / "train.jsonl", rows(64, 0)),
                    dev=write_jsonl(tmp_path / "dev.jsonl", rows(16, 1)), epochs=12, lr=1e-3, batch_size=4,
                    max_length=16, warmup_ratio=0.1, eval_every=0, early_stopping_patience=0, class_weights="none",
                    precision="fp32", device="cpu", save_every=5, baseline=False, progress_bar=False)
    kill_and_resume("finetune", settings, tmp_path)


@pytest.mark.slow
def test_distill_resumes_after_kill_9(tmp_path):
    settings = dict(teacher=model_folder(tmp_path / "teacher", "classifier"), student_layers=1,
                    train=write_jsonl(tmp_path / "train.jsonl", rows(48, 0)),
                    dev=write_jsonl(tmp_path / "dev.jsonl", rows(12, 1)), epochs=16, lr=1e-3, batch_size=4,
                    max_length=16, hidden_weight=1.0, precision="fp32", device="cpu", save_every=5,
                    progress_bar=False)
    kill_and_resume("distill", settings, tmp_path)


@pytest.mark.slow
def test_simcse_resumes_after_kill_9(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(r["text"] + f" {WORDS[15 + i % 5]}" for i, r in enumerate(rows(64, 2))) + "\n",
                      encoding="utf-8")
    pairs = [{"text_a": r["text"], "text_b": r["text"] + " ."} for r in rows(8, 3)]
    settings = dict(model=model_folder(tmp_path / "base"), train=str(corpus),
                    dev=write_jsonl(tmp_path / "dev.jsonl", pairs), epochs=24, lr=1e-3, batch_size=8,
                    max_length=16, eval_every=40, precision="fp32", device="cpu", save_every=5, progress_bar=False)
    kill_and_resume("simcse", settings, tmp_path)


@pytest.mark.slow
def test_seq2seq_resumes_after_kill_9(tmp_path):
    pairs = [{"source": r["text"], "target": r["label"] == "pos" and "good" or "bad"} for r in rows(32, 0)]
    settings = dict(model=model_folder(tmp_path / "base", "mlm"), train=write_jsonl(tmp_path / "train.jsonl", pairs),
                    dev=write_jsonl(tmp_path / "dev.jsonl", pairs[:8]), epochs=24, lr=1e-3, batch_size=4,
                    max_length=16, precision="fp32", device="cpu", save_every=5, progress_bar=False)
    kill_and_resume("seq2seq", settings, tmp_path)


@pytest.mark.parametrize("command", ["finetune", "seq2seq", "distill", "simcse"])
def test_resume_without_a_saved_state_is_one_line_and_exit_2(tmp_path, capsys, command):
    from bertkit.cli import main

    out = tmp_path / "out"
    data = write_jsonl(tmp_path / "train.jsonl", rows(8, 0))
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"source": "the film", "target": "good"}] * 4)
    argv = {"finetune": ["finetune", "--model", model_folder(tmp_path / "m"), "--train", data],
            "seq2seq": ["finetune", "--task", "seq2seq", "--model", model_folder(tmp_path / "m", "mlm"),
                        "--train", pairs],
            "distill": ["distill", "--teacher", model_folder(tmp_path / "m", "classifier"), "--student-layers", "1",
                        "--train", data],
            "simcse": ["simcse", "--model", model_folder(tmp_path / "m"), "--train", data]}[command]
    assert main([*argv, "--output", str(out), "--save-every", "2", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"bertkit: error: --resume: no training state at {state_path(out / 'run')}; start without --resume"]
    assert not out.exists()                   # nothing was written before the error
