"""ELECTRA's pre-training pieces: the generator's size, shared embeddings, replaced tokens, and the two folders
transformers loads (ElectraForPreTraining, ElectraForMaskedLM) with the same logits."""
import pytest
import torch

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.model import Encoder, EncoderConfig, preset
from bertkit.model.electra import ElectraPretrainingModel, generator_config, replace_masked

VOCAB = 60


def discriminator_config():
    return EncoderConfig(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128,
                         max_position_embeddings=32, embedding_size=32, use_pooler=False, family="electra",
                         hidden_dropout=0.0, attention_dropout=0.0)


def pretraining_model(seed=0):
    torch.manual_seed(seed)
    disc = discriminator_config()
    return ElectraPretrainingModel(Encoder(disc), Encoder(generator_config(disc, width=0.25)))


def masked_batch(seed=1):
    torch.manual_seed(seed)
    original = torch.randint(5, VOCAB, (3, 12))
    masked = torch.rand(3, 12) < 0.3
    masked[:, 0] = True
    return original.masked_fill(masked, 4), original, masked


def test_generator_size_follows_electra():
    base = preset("bert-base", family="electra", use_pooler=False)
    third = generator_config(base, width=1 / 3)                 # ELECTRA-Base: a 256-wide generator
    assert (third.hidden_size, third.num_heads, third.intermediate_size, third.num_layers) == (256, 4, 1024, 12)
    assert third.token_embedding_size == 768 and third.family == "electra" and not third.use_pooler
    odd = generator_config(base.replace(hidden_size=800, num_heads=8), width=0.25)   # 200 wide: 3 heads do not divide
    assert odd.hidden_size == 200 and 200 % odd.num_heads == 0
    with pytest.raises(ValueError, match="fractions"):
        generator_config(base, width=1.5)


def test_embeddings_are_shared_and_trained_by_both_losses():
    model = pretraining_model()
    disc, gen = model.discriminator.embeddings, model.generator.embeddings
    for name in ("token", "position", "segment", "norm"):
        assert getattr(gen, name) is getattr(disc, name)
    assert gen.project is not disc.project                       # each projects to its own width
    names = {name for name, _ in model.named_parameters()}
    assert not any(name.startswith("generator.embeddings.token") for name in names)   # counted once
    masked_ids, original, masked = masked_batch()
    out = model(masked_ids, original, masked, rng=torch.Generator().manual_seed(0))
    out.generator_logits.logsumexp(-1).sum().backward(retain_graph=True)
    assert disc.token.weight.grad.abs().sum() > 0 and model.generator.blocks[0].ffn.up.weight.grad is not None
    model.zero_grad(set_to_none=True)
    out.discriminator_logits.sum().backward()
    assert disc.token.weight.grad.abs().sum() > 0
    assert model.generator.blocks[0].ffn.up.weight.grad is None  # sampling passes no gradient to the generator


def test_replaced_tokens():
    original = torch.tensor([[7, 8, 9, 10]])
    masked = torch.tensor([[False, True, True, False]])
    certain = torch.full((2, 20), -1e4)
    certain[0, 8] = certain[1, 3] = 0.0                          # first masked: its own token; second: token 3
    out = replace_masked(original, masked, certain)
    assert out.input_ids.tolist() == [[7, 8, 3, 10]]
    assert out.replaced.tolist() == [[False, False, True, False]]   # sampling the original token is "original"
    # samples follow the generator's distribution
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(4000, 3)
    draws = replace_masked(torch.zeros(1, 4000, dtype=torch.long), torch.ones(1, 4000, dtype=torch.bool), logits,
                           torch.Generator().manual_seed(0)).input_ids[0]
    frequencies = torch.bincount(draws, minlength=3).float() / 4000
    assert (frequencies - torch.tensor([0.7, 0.2, 0.1])).abs().max() < 0.03
    # a wide vocabulary with zero-probability tokens (first, last and between): never drawn, the rest in proportion
    probabilities = torch.rand(50, generator=torch.Generator().manual_seed(1))
    probabilities[[0, 17, 18, 49]] = 0.0
    probabilities /= probabilities.sum()
    draws = replace_masked(torch.zeros(1, 20000, dtype=torch.long), torch.ones(1, 20000, dtype=torch.bool),
                           probabilities.log().expand(20000, 50), torch.Generator().manual_seed(2)).input_ids[0]
    frequencies = torch.bincount(draws, minlength=50).float() / 20000
    assert frequencies[[0, 17, 18, 49]].sum() == 0
    assert (frequencies - probabilities).abs().max() < 0.01


def test_saved_discriminator_and_generator_load_in_transformers(tmp_path):
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    model = pretraining_model().eval()
    masked_ids, original, masked = masked_batch()
    with torch.no_grad():
        out = model(masked_ids, original, masked, rng=torch.Generator().manual_seed(0))
    for part, encoder in (("discriminator", model.discriminator), ("generator", model.generator)):
        save_checkpoint(tmp_path / part, encoder, None, model.heads()[part])
    with torch.no_grad():
        disc = ElectraForPreTraining.from_pretrained(str(tmp_path / "discriminator")).eval()
        gen = ElectraForMaskedLM.from_pretrained(str(tmp_path / "generator")).eval()
        assert (disc(input_ids=out.corrupted_ids).logits - out.discriminator_logits).abs().max() <= 1e-4
        assert (gen(input_ids=masked_ids).logits[masked] - out.generator_logits).abs().max() <= 1e-4
    # and back: the two folders rebuild the same pre-training model
    d, g = load_checkpoint(tmp_path / "discriminator"), load_checkpoint(tmp_path / "generator")
    again = ElectraPretrainingModel(d.encoder, g.encoder, d.heads["discriminator"], g.heads["mlm"]).eval()
    with torch.no_grad():
        rebuilt = again(masked_ids, original, masked, rng=torch.Generator().manual_seed(0))
    assert torch.equal(rebuilt.corrupted_ids, out.corrupted_ids)
    assert (rebuilt.discriminator_logits - out.discriminator_logits).abs().max() <= 1e-5
