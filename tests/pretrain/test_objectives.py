"""The objectives registry and ELECTRA pre-training end to end: the loss falls, the discriminator and generator
folders load in transformers with the outputs bertkit computes, and they share their embeddings."""
import importlib
import json

import pytest
import torch

from bertkit.checkpoints import load_checkpoint
from bertkit.cli import build_parser, main
from bertkit.pretrain.objectives import OBJECTIVES
from test_job import TINY, TINY_CONFIG, interrupt_at

transformers = pytest.importorskip("transformers")


def records(folder):
    return [json.loads(line) for line in (folder / "run" / "log.jsonl").read_text().splitlines()]


def short_run(tmp_path, corpus, vocab_dir, objective_flags, steps=80):
    """A tiny pre-training run; returns its folder and the training log records."""
    out = tmp_path / "run"
    assert main(["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--output",
                 str(out), *objective_flags, "--max-steps", str(steps), *TINY, "--train.warmup_steps=4",
                 "--train.lr=3e-3"]) == 0
    return out, [r for r in records(out) if "lr" in r]


def falls(steps, key, ratio=0.9) -> bool:
    """The mean of the last 10 logged values is below ratio x the mean of the first 10. On the test corpus of
    random words a model starts at ln(50-token vocabulary) = 3.9 and can reach about ln 25 = 3.2."""
    first, last = (sum(r[key] for r in rows) / len(rows) for rows in (steps[:10], steps[-10:]))
    return last < ratio * first


def test_cli_choices_come_from_the_registry_and_an_unknown_objective_is_one_line(tmp_path, corpus, vocab_dir,
                                                                                  capsys):
    pretrain = build_parser()._subparsers._group_actions[0].choices["pretrain"]
    choices = next(a.choices for a in pretrain._actions if a.dest == "objective")
    assert list(choices) == list(OBJECTIVES)
    assert main(["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--output",
                 str(tmp_path / "o"), "--max-steps", "2", *TINY, "--data.objective=mlm+xyz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.objective 'mlm+xyz'" in err[0] and "electra" in err[0]
    assert main(["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--output",
                 str(tmp_path / "o"), "--max-steps", "2", *TINY, "--objective", "electra",
                 "--electra.generator_width=1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "electra.generator_width" in err[0] and "1.5" in err[0]


def test_electra_loss_falls_and_both_folders_load_in_transformers(tmp_path, corpus, vocab_dir, capsys):
    out, steps = short_run(tmp_path, corpus, vocab_dir, ["--objective", "electra", "--train.eval_every=80"])
    assert len(steps) == 80
    assert falls(steps, "loss") and falls(steps, "rtd_loss", 1.0) and falls(steps, "mlm_loss", 1.0)
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


def test_span_boundaries_of_planted_spans():
    from bertkit.pretrain.objectives.sbo import span_boundaries

    #                 CLS  a  b  M  M  c  M  d  SEP
    masked = torch.tensor([[0, 0, 0, 1, 1, 0, 1, 0, 0],
                           [0, 1, 1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    spans = span_boundaries(masked)
    assert spans.row.tolist() == [0, 0, 0, 1, 1, 1]
    assert spans.left.tolist() == [2, 2, 5, 0, 0, 0]
    assert spans.right.tolist() == [5, 5, 7, 4, 4, 4]
    assert spans.offset.tolist() == [0, 1, 0, 0, 1, 2]
    # against a loop over random masks ([CLS] / [SEP] at the ends never masked)
    generator = torch.Generator().manual_seed(0)
    masked = torch.rand(6, 40, generator=generator) < 0.4
    masked[:, 0] = masked[:, -1] = False
    spans = span_boundaries(masked)
    expected = []
    for b in range(6):
        for t in range(40):
            if masked[b, t]:
                left = max(i for i in range(t) if not masked[b, i])
                right = min(i for i in range(t, 40) if not masked[b, i])
                expected.append((b, left, right, t - left - 1))
    assert list(zip(*(x.tolist() for x in spans))) == expected


def test_sbo_logits_see_only_the_boundaries_and_the_offset():
    from bertkit.model.config import EncoderConfig
    from bertkit.pretrain.objectives.sbo import SpanBoundaryHead, span_boundaries

    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                           max_position_embeddings=16)
    head = SpanBoundaryHead(config, 16).eval()
    words = torch.randn(30, 16)
    masked = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 0]], dtype=torch.bool)          # span 2..4, boundaries 1 and 5
    hidden = torch.randn(1, 8, 16)
    spans = span_boundaries(masked)
    base = head(hidden, spans, words)
    inside = hidden.clone()
    inside[0, 2:5] += 5.0                                                          # the span itself, and
    inside[0, 6:] -= 3.0                                                           # what lies beyond the boundary
    assert torch.allclose(head(inside, spans, words), base)
    boundary = hidden.clone()
    boundary[0, 5] += 1.0
    assert not torch.allclose(head(boundary, spans, words)[0], base[0])
    assert not torch.allclose(base[0], base[1])                                    # same boundaries, other offset


def test_sbo_run_loss_falls_and_saves_a_masked_lm_folder(tmp_path, corpus, vocab_dir, capsys):
    out, steps = short_run(tmp_path, corpus, vocab_dir, ["--objective", "mlm+sbo"])
    assert falls(steps, "sbo_loss") and falls(steps, "mlm_loss")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    assert set(load_checkpoint(out).heads) == {"mlm"}


def test_plm_loss_falls_and_the_folder_is_an_xlnet_lm_that_transformers_computes_alike(tmp_path, corpus, vocab_dir,
                                                                                      capsys):
    from bertkit.model.permutation import permutation_targets

    out, steps = short_run(tmp_path, corpus, vocab_dir, ["--arch", "xlnet"])
    assert falls(steps, "plm_loss")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["XLNetLMHeadModel"]

    ours = load_checkpoint(out)
    ids = torch.randint(5, ours.config.vocab_size, (2, 14))
    mask = torch.ones_like(ids)
    targets = permutation_targets(torch.ones(2, 14, dtype=torch.bool), 6, torch.Generator().manual_seed(0))
    with torch.no_grad():
        encoded = ours.encoder(ids, attention_mask=mask, perm_mask=targets.perm_mask,
                               target_mapping=targets.target_mapping)
        logits = ours.heads["lm"](encoded.query_hidden_state, ours.encoder.embeddings.token.weight)
        hf = transformers.XLNetLMHeadModel.from_pretrained(out).eval()
        theirs = hf(input_ids=ids, attention_mask=mask, perm_mask=targets.perm_mask,
                    target_mapping=targets.target_mapping).logits
    assert theirs.shape == logits.shape and (theirs - logits).abs().max() <= 1e-4


@pytest.mark.parametrize("objective", ["electra", "plm"])
def test_kill_and_resume_continues_the_loss_curve_of_sampling_objectives(tmp_path, corpus, vocab_dir, monkeypatch,
                                                                        objective):
    """ELECTRA's sampled replacements and XLNet's factorization orders come from the RNG the loop saves and
    restores, so a resumed run repeats the uninterrupted one."""
    module, name = OBJECTIVES[objective].split(":")
    cls = getattr(importlib.import_module(module), name)
    common = ["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--objective",
              objective, "--max-steps", "20", "--train.save_every=10", "--train.warmup_steps=2", *TINY]
    assert main([*common, "--output", str(tmp_path / "full")]) == 0
    real_loss = interrupt_at(monkeypatch, cls, 15)
    assert main([*common, "--output", str(tmp_path / "cut")]) == 130
    monkeypatch.setattr(cls, "loss", real_loss)
    assert main([*common, "--output", str(tmp_path / "cut"), "--resume"]) == 0
    full = {r["step"]: r["loss"] for r in records(tmp_path / "full") if "lr" in r}
    cut = {r["step"]: r["loss"] for r in records(tmp_path / "cut") if "lr" in r}
    for step in range(11, 21):
        assert cut[step] == pytest.approx(full[step], abs=1e-5), step
