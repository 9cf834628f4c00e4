"""The objectives registry and ELECTRA pre-training end to end: the loss falls, the discriminator and generator
folders load in transformers with the outputs bertkit computes, and they share their embeddings."""
import json

import pytest
import torch

from bertkit.checkpoints import load_checkpoint
from bertkit.cli import build_parser, main
from bertkit.pretrain.objectives import OBJECTIVES
from test_job import TINY, TINY_CONFIG

transformers = pytest.importorskip("transformers")


def records(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def test_cli_choices_come_from_the_registry_and_an_unknown_objective_is_one_line(tmp_path, corpus, vocab_dir,
                                                                                  capsys):
    pretrain = build_parser()._subparsers._group_actions[0].choices["pretrain"]
    choices = next(a.choices for a in pretrain._actions if a.dest == "objective")
    assert list(choices) == list(OBJECTIVES)
    assert main(["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--output",
                 str(tmp_path / "o"), "--max-steps", "2", *TINY, "--data.objective=mlm+xyz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.objective 'mlm+xyz'" in err[0] and "electra" in err[0]


def test_electra_loss_falls_and_both_folders_load_in_transformers(tmp_path, corpus, vocab_dir, capsys):
    out = tmp_path / "electra"
    assert main(["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--output",
                 str(out), "--objective", "electra", "--max-steps", "60", *TINY, "--train.warmup_steps=5",
                 "--train.eval_every=60"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 60
    steps = [r for r in records(out) if "lr" in r]
    first, last = steps[:10], steps[-10:]
    mean = lambda rows, key: sum(r[key] for r in rows) / len(rows)   # noqa: E731
    assert mean(last, "loss") < 0.9 * mean(first, "loss")
    assert mean(last, "rtd_loss") < mean(first, "rtd_loss") and mean(last, "mlm_loss") < mean(first, "mlm_loss")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    assert json.loads((out / "generator" / "config.json").read_text())["architectures"] == ["ElectraForMaskedLM"]

    disc, gen = load_checkpoint(out), load_checkpoint(out / "generator")
    assert gen.config.hidden_size == disc.config.hidden_size // 4          # the generator is 1/4 as wide
    assert torch.equal(gen.encoder.embeddings.token.weight, disc.encoder.embeddings.token.weight)   # shared
    ids = torch.randint(5, disc.config.vocab_size, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    with torch.no_grad():
        hidden = disc.encoder(ids, attention_mask=mask).last_hidden_state
        ours_disc = disc.heads["discriminator"](hidden)
        gen_hidden = gen.encoder(ids, attention_mask=mask).last_hidden_state
        ours_gen = gen.heads["mlm"](gen_hidden, gen.encoder.embeddings.token.weight)
        hf_disc = transformers.ElectraForPreTraining.from_pretrained(out).eval()
        hf_body = transformers.ElectraModel.from_pretrained(out).eval()
        hf_gen = transformers.ElectraForMaskedLM.from_pretrained(out / "generator").eval()
        real = mask.bool()
        assert (hf_disc(input_ids=ids, attention_mask=mask).logits - ours_disc)[real].abs().max() <= 1e-4
        assert (hf_body(input_ids=ids, attention_mask=mask).last_hidden_state - hidden)[real].abs().max() <= 1e-4
        assert (hf_gen(input_ids=ids, attention_mask=mask).logits - ours_gen)[real].abs().max() <= 1e-4
