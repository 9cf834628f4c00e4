import torch
import pytest

from bertkit.distill.prune import (apply_pruned_heads, head_gates, head_importance, heads_to_prune, prune_heads,
                                   pruned_heads_record, load_pruned_transformers)
from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.distill.prune_job import prune_and_measure
from bertkit.model.encoder import Encoder

from distill_fixtures import tiny_config, write_examples


def _inputs():
    ids = torch.randint(5, 32, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[2, 5:] = 0
    return ids, mask


def test_pruned_model_equals_masked_heads_model():
    torch.manual_seed(0)
    encoder = Encoder(tiny_config()).eval()
    ids, mask = _inputs()
    remove = {0: [1, 3], 1: [0]}
    gates = torch.ones(2, 4)
    for layer, heads in remove.items():
        gates[layer, heads] = 0
    with torch.no_grad(), head_gates(encoder, gates):
        masked = encoder(ids, mask).last_hidden_state
    prune_heads(encoder, remove)
    with torch.no_grad():
        pruned = encoder(ids, mask).last_hidden_state
    assert [b.attention.num_heads for b in encoder.blocks] == [2, 3]
    assert encoder.blocks[0].attention.qkv.weight.shape == (3 * 2 * 8, 32)
    assert encoder.blocks[0].attention.out.weight.shape == (32, 2 * 8)
    torch.testing.assert_close(pruned, masked, atol=1e-5, rtol=1e-5)


def test_pruning_twice_keeps_original_head_indices():
    encoder = Encoder(tiny_config()).eval()
    prune_heads(encoder, {0: [1]})          # heads 0, 2, 3 left
    prune_heads(encoder, {0: [1]})          # removes original head 2
    assert pruned_heads_record(encoder) == {"0": [1, 2]}
    fresh = apply_pruned_heads(Encoder(tiny_config()), {"0": [1, 2]})
    assert fresh.blocks[0].attention.kept_heads == [0, 3]


def test_heads_to_prune_fraction_and_per_layer():
    importance = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.2, 0.3, 0.05, 0.8]])
    assert heads_to_prune(importance, fraction=0.25) == {0: [0], 1: [2]}
    assert heads_to_prune(importance, per_layer=1) == {0: [0], 1: [2]}
    # every layer keeps at least one head
    assert all(len(v) <= 3 for v in heads_to_prune(importance, fraction=1.0).values())


def test_importance_is_gradient_magnitude_of_gates():
    torch.manual_seed(0)
    encoder = Encoder(tiny_config()).eval()
    ids, mask = _inputs()

    def loss_of(model, batch):
        return model(*batch).last_hidden_state.pow(2).mean()

    importance = head_importance(encoder, encoder, [(ids, mask)], loss_of, normalize_layers=False)
    gates = torch.ones(2, 4, requires_grad=True)
    with head_gates(encoder, gates):
        loss_of(encoder, (ids, mask)).backward()
    torch.testing.assert_close(importance, gates.grad.abs())
    assert all(p.requires_grad for p in encoder.parameters())


def test_prune_job_saves_and_reloads_in_bertkit_and_transformers(model_dir, tmp_path):
    dev = write_examples(tmp_path / "dev.jsonl", 12)
    report = prune_and_measure(model_dir, tmp_path / "pruned", str(dev), fraction=0.3)
    assert sum(report.heads_per_layer) == 8 - 2
    reloaded = load_checkpoint(tmp_path / "pruned")
    assert [b.attention.num_heads for b in reloaded.encoder.blocks] == report.heads_per_layer
    ids, mask = _inputs()
    hf_model = load_pruned_transformers(tmp_path / "pruned")
    with torch.no_grad():
        ours = reloaded.heads["classifier"](reloaded.encoder(ids, mask).pooled_output)
        theirs = hf_model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_prune_job_writes_a_full_shape_copy_plain_from_pretrained_loads(model_dir, tmp_path):
    """transformers 5 ignores config.json pruned_heads: bertkit's folder keeps the smaller layers, and its
    transformers/ subfolder holds full shapes with the pruned heads zeroed, which from_pretrained loads as is."""
    import json

    from transformers import BertForSequenceClassification

    dev = write_examples(tmp_path / "dev.jsonl", 12)
    prune_and_measure(model_dir, tmp_path / "pruned", str(dev), fraction=0.3)
    pruned = load_checkpoint(tmp_path / "pruned")
    copy = tmp_path / "pruned" / "transformers"
    hf_model, info = BertForSequenceClassification.from_pretrained(str(copy), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, mask = _inputs()
    with torch.no_grad():
        ours = pruned.heads["classifier"](pruned.encoder(ids, mask).pooled_output)
        theirs = hf_model.eval()(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    assert "full shapes" in json.loads((copy / "bertkit.json").read_text())["pruning"]["form"]
    assert "smaller layers" in json.loads((tmp_path / "pruned" / "bertkit.json").read_text())["pruning"]["form"]
    assert load_checkpoint(copy).encoder.pruned_heads() == {}          # every layer at full width
    from transformers import AutoModelForSequenceClassification
    with pytest.raises(ValueError, match="bertkit"):      # the smaller layers: refused, not re-initialized at random
        AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "pruned"))


def test_full_shape_copy_computes_the_pruned_model(tmp_path):
    from bertkit.distill.prune import full_shape_copy

    torch.manual_seed(0)
    encoder = Encoder(tiny_config()).eval()
    prune_heads(encoder, {0: [1, 2], 1: [0]})
    full = full_shape_copy(encoder)
    assert [b.attention.num_heads for b in full.blocks] == [4, 4]
    ids, mask = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(full(ids, mask).last_hidden_state, encoder(ids, mask).last_hidden_state,
                                   atol=1e-6, rtol=0)


@pytest.mark.parametrize("amount, message", [(["--per-layer", "20"], "--per-layer 20: the model has 4 heads"),
                                             (["--per-layer", "0"], "--per-layer 0"),
                                             (["--fraction", "1.5"], "--fraction 1.5"),
                                             (["--fraction", "-0.1"], "--fraction -0.1")])
def test_pruning_more_heads_than_a_layer_has_is_one_line_error(model_dir, tmp_path, capsys, amount, message):
    """Not a quietly smaller pruning (--per-layer 20 of 4 heads removed 3), nor, for a negative fraction, the
    largest one possible; nothing is written."""
    dev = write_examples(tmp_path / "dev.jsonl", 6)
    assert main(["prune-heads", "--model", str(model_dir), "--output", str(tmp_path / "p"), "--dev", str(dev),
                 *amount]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "p").exists()
