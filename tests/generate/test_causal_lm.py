import torch

from bertkit.generate import CausalLM, causal_lm_loss


def test_logits_are_causal_and_tied(tiny_model, tiny_config):
    ids = torch.randint(0, tiny_config.vocab_size, (2, 8))
    logits = tiny_model(ids).logits
    assert logits.shape == (2, 8, tiny_config.vocab_size)
    changed = ids.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % tiny_config.vocab_size
    torch.testing.assert_close(tiny_model(changed).logits[:, :5], logits[:, :5])  # the future is invisible
    assert not any(p is tiny_model.word_embeddings.weight for n, p in tiny_model.named_parameters()
                   if n != "encoder.embeddings.token.weight")                     # the head owns no weights


def test_gpt2_shape_of_the_config(tiny_config, tiny_model):
    assert tiny_config.causal and tiny_config.norm_position == "pre" and not tiny_config.embedding_norm
    assert tiny_model.encoder.pooler is None and tiny_model.encoder.embeddings.segment is None
    assert tiny_model.word_embeddings.padding_idx is None          # token 0 is a real token in GPT-2
    down = tiny_model.encoder.blocks[0].ffn.down.weight.std().item()
    up = tiny_model.encoder.blocks[0].ffn.up.weight.std().item()
    assert down < up                                               # scaled residual init: 0.02 / sqrt(2L)


def test_loss_ignores_padding_and_learns(tiny_config):
    torch.manual_seed(0)
    model = CausalLM(tiny_config).eval()       # no dropout, so the two losses compare exactly
    ids = torch.randint(0, tiny_config.vocab_size, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    loss, metrics = causal_lm_loss(model, {"input_ids": ids, "attention_mask": mask})
    assert metrics["tokens"] == 5 + 3
    padded = ids.clone()
    padded[1, 4:] = 7
    torch.testing.assert_close(causal_lm_loss(model, {"input_ids": padded, "attention_mask": mask})[0], loss)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(12):
        loss, _ = causal_lm_loss(model, {"input_ids": ids})
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < first / 2
