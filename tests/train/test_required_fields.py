"""Every training job names the first missing required flag in one line (train/fit.py's check_required), before it
reads data or builds a model; the message spells the flag as its command does."""
from __future__ import annotations

import pytest

from bertkit.distill.config import DistillConfig
from bertkit.distill.job import run_distill
from bertkit.embed.config import SimCSEConfig
from bertkit.embed.simcse import run_simcse
from bertkit.errors import BertkitError
from bertkit.job_config import job_config
from bertkit.finetune.config import FinetuneConfig
from bertkit.finetune.job import run_finetune
from bertkit.finetune.rerank import RerankConfig, run_rerank_finetune
from bertkit.finetune.seq2seq.job import Seq2SeqConfig, run_seq2seq_finetune
from bertkit.finetune.seq2seq.simbert import SimBertConfig, run_simbert_finetune

JOBS = [(run_finetune, FinetuneConfig, "finetune", "model"),
        (run_seq2seq_finetune, Seq2SeqConfig, "finetune --task seq2seq", "model"),
        (run_simbert_finetune, SimBertConfig, "finetune --task simbert", "model"),
        (run_rerank_finetune, RerankConfig, "finetune --task rerank", "model"),
        (run_simcse, SimCSEConfig, "simcse", "model"),
        (run_distill, DistillConfig, "distill", "teacher")]


@pytest.mark.parametrize("run, config_class, command, first", JOBS, ids=[j[2] for j in JOBS])
def test_a_missing_required_flag_is_one_line_naming_it(run, config_class, command, first, tmp_path):
    with pytest.raises(BertkitError) as error:
        run(job_config(config_class, train="", output=str(tmp_path / "out"), **{first: "some/folder"}))
    assert str(error.value) == f"{command} needs --train"
    with pytest.raises(BertkitError) as error:
        run(job_config(config_class, train=str(tmp_path / "t.jsonl"), output=str(tmp_path / "out")))
    assert str(error.value) == f"{command} needs --{first}"
    assert not (tmp_path / "out").exists()
