"""Runs one training job in its own process, for the kill -9 tests: python kill_worker.py JOB SETTINGS.json"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import torch

from bertkit.job_config import job_config

# job name -> (module, config class, run function): each goes through bertkit.train.fit
JOBS = {
    "finetune": ("bertkit.finetune.job", "FinetuneConfig", "run_finetune"),
    "distill": ("bertkit.distill.job", "DistillConfig", "run_distill"),
    "simcse": ("bertkit.embed.simcse", "SimCSEConfig", "run_simcse"),
    "seq2seq": ("bertkit.finetune.seq2seq.job", "Seq2SeqConfig", "run_seq2seq_finetune"),
}


def run_job(name: str, settings: dict):
    module_name, config_name, run_name = JOBS[name]
    module = importlib.import_module(module_name)
    return getattr(module, run_name)(job_config(getattr(module, config_name), **settings))


if __name__ == "__main__":
    torch.set_num_threads(1)          # as tests/train/conftest.py: the same arithmetic as the in-process runs
    run_job(sys.argv[1], json.loads(Path(sys.argv[2]).read_text(encoding="utf-8")))
