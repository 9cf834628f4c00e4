"""ELECTRA folders against transformers, both ways: random small models (no weights are downloadable), every
parameter perturbed so a swapped or dropped name shows, outputs compared to 1e-4."""
import json

import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.errors import CheckpointError
from bertkit.finetune.model import FinetuneModel

TOL = 1e-4
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz.,!?") + [
    "##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + ["the", "cat", "dog", "sat", "on", "mat", "hello", "world"]


def electra_config(**changes):
    from transformers import ElectraConfig
    settings = dict(vocab_size=len(TINY_VOCAB), embedding_size=16, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=48, max_position_embeddings=40, num_labels=3)
    return ElectraConfig(**{**settings, **changes})


def random_hf(cls, config, seed=0):
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():                      # biases and LayerNorms away from 0 / 1, so every name matters
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    model.tie_weights()
    return model


def hf_folder(cls, config, path, seed=0):
    model = random_hf(cls, config, seed)
    model.save_pretrained(str(path))
    (path / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    return model


def batch(seed=1):
    torch.manual_seed(seed)
    ids = torch.randint(5, len(TINY_VOCAB), (3, 11))
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    return ids, mask, types


def hf_run(model, ids, mask, types):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)


def bertkit_logits(checkpoint, ids, mask, types):
    """What each bertkit head gives on the batch, in the shape of the matching HF output."""
    encoder, heads = checkpoint.encoder, checkpoint.heads
    with torch.no_grad():
        hidden = encoder(ids, mask, types).last_hidden_state
        if "discriminator" in heads:
            return heads["discriminator"](hidden)
        if "mlm" in heads:
            return heads["mlm"](hidden, encoder.embeddings.token.weight)
        if "classifier" in heads:
            return FinetuneModel(encoder, heads["classifier"], "classification")(ids, mask, types)
        if "token_classifier" in heads:
            return heads["token_classifier"](hidden)
        return hidden


CLASSES = {
    "ElectraModel": {},
    "ElectraForPreTraining": dict(hidden_act="relu"),               # the discriminator head uses hidden_act
    # a generator, narrower than its embeddings; its MLM head uses gelu whatever hidden_act says
    "ElectraForMaskedLM": dict(hidden_size=8, num_attention_heads=2, intermediate_size=32, hidden_act="gelu_new"),
    "ElectraForSequenceClassification": {},
    "ElectraForTokenClassification": {},
    "ElectraForQuestionAnswering": dict(embedding_size=32, num_labels=2),        # no projection
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_hf_electra_folder_matches_transformers_both_ways(name, tmp_path):
    import transformers

    cls = getattr(transformers, name)
    reference = hf_folder(cls, electra_config(**CLASSES[name]), tmp_path / "hf")
    ids, mask, types = batch()
    expected = hf_run(reference, ids, mask, types)
    checkpoint = load_checkpoint(tmp_path / "hf")
    assert checkpoint.config.family == "electra" and checkpoint.encoder.pooler is None
    real = mask.bool()
    with torch.no_grad():
        ours = checkpoint.encoder(ids, mask, types, output_hidden_states=True)
    for got, want in zip(ours.hidden_states, expected.hidden_states):
        assert (got - want)[real].abs().max() <= TOL
    if name == "ElectraForQuestionAnswering":
        start, end = checkpoint.heads["qa"](ours.last_hidden_state)
        assert (start - expected.start_logits).abs().max() <= TOL and (end - expected.end_logits).abs().max() <= TOL
    elif name != "ElectraModel":
        logits = bertkit_logits(checkpoint, ids, mask, types)
        assert logits.shape == expected.logits.shape
        assert (logits - expected.logits)[real if logits.dim() > 1 and logits.shape[1] == ids.shape[1]
                                          else slice(None)].abs().max() <= TOL

    # bertkit-saved -> transformers: the same class, the same outputs
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 0
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert saved["model_type"] == "electra" and saved["architectures"] == [name]
    again = getattr(transformers, name).from_pretrained(str(tmp_path / "ours")).eval()
    result = hf_run(again, ids, mask, types)
    for field in ("logits", "start_logits", "last_hidden_state"):
        if getattr(expected, field, None) is not None:
            assert (getattr(result, field) - getattr(expected, field)).abs().max() <= TOL, field


def test_bertkit_encode_and_model_only_folder(tmp_path):
    from transformers import ElectraModel
    from bertkit.tokenizer import Tokenizer

    reference = hf_folder(ElectraModel, electra_config(), tmp_path / "hf")
    texts = ["the cat sat on the mat", "hello world", "the dog"]
    encoded = Tokenizer.from_folder(tmp_path / "hf").pad_to_tensors(
        Tokenizer.from_folder(tmp_path / "hf").encode_batch(texts))
    with torch.no_grad():
        hidden = reference(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
    weights = encoded["attention_mask"].unsqueeze(-1).float()
    expected = ((hidden * weights).sum(1) / weights.sum(1)).numpy()
    vectors = bertkit.load(tmp_path / "hf").encode(texts, pooling="mean")
    assert abs(vectors - expected).max() <= TOL


def test_bertkit_electra_saves_what_transformers_loads(tmp_path):
    """A folder made in bertkit (not converted from HF): ElectraForPreTraining in transformers, and back."""
    from transformers import ElectraForPreTraining
    from bertkit.model import Encoder, EncoderConfig
    from bertkit.model.heads import ReplacedTokenHead
    from bertkit.tokenizer import Tokenizer

    torch.manual_seed(3)
    config = EncoderConfig(vocab_size=len(TINY_VOCAB), hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
                           max_position_embeddings=40, embedding_size=16, use_pooler=False, family="electra")
    encoder, head = Encoder(config).eval(), ReplacedTokenHead(config).eval()
    tokenizer = Tokenizer.from_vocab({token: i for i, token in enumerate(TINY_VOCAB)})
    save_checkpoint(tmp_path / "d", encoder, tokenizer, {"discriminator": head})
    ids, mask, types = batch()
    with torch.no_grad():
        ours = head(encoder(ids, mask, types).last_hidden_state)
    theirs = hf_run(ElectraForPreTraining.from_pretrained(str(tmp_path / "d")).eval(), ids, mask, types).logits
    assert (ours - theirs)[mask.bool()].abs().max() <= TOL
    back = load_checkpoint(tmp_path / "d")
    assert (bertkit_logits(back, ids, mask, types) - ours).abs().max() == 0


def test_electra_variant_without_hf_form_is_refused(tmp_path):
    from bertkit.model import Encoder, EncoderConfig

    config = EncoderConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                           use_pooler=False, share_layers="all", family="electra")
    with pytest.raises(CheckpointError, match="share_layers"):
        save_checkpoint(tmp_path / "x", Encoder(config), None)


def test_untied_generator_head_and_wrong_model_type_are_named(tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    hf_folder(ElectraForMaskedLM, electra_config(), tmp_path / "g")
    weights = load_file(str(tmp_path / "g" / "model.safetensors"))
    weights["generator_lm_head.weight"] = torch.randn(len(TINY_VOCAB), 16)
    save_file(weights, str(tmp_path / "g" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="generator_lm_head.weight differs"):
        load_checkpoint(tmp_path / "g")

    config = json.loads((tmp_path / "g" / "config.json").read_text())
    (tmp_path / "g" / "config.json").write_text(json.dumps({**config, "model_type": "deberta-v2"}))
    with pytest.raises(CheckpointError, match="model_type 'deberta-v2' is not a BERT-family encoder"):
        load_checkpoint(tmp_path / "g")

    hf_folder(ElectraForPreTraining, electra_config(), tmp_path / "d")                # ELECTRA weights, BERT's type
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    (tmp_path / "d" / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(CheckpointError, match="model_type 'bert' reads none of the weights"):
        load_checkpoint(tmp_path / "d")
