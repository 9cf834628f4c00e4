"""ELECTRA's replaced-token detection checked where it can be silently wrong: the discriminator reads the corrupted
ids, its targets are aligned with them, padding is out of the loss and the metrics, the loss is MLM + lambda x
RTD, and on planted replacements the discriminator beats the constant "original" prediction (the prior) on the
replaced AND on the original tokens."""
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.pretrain.objectives.electra import electra_loss
from electra_tiny import MASK, T, VOCAB, as_batch, model_inputs, pretraining_model

IN_CONTEXT = 40          # planted data uses ids 5..39; ids 40..59 never occur in a text


def planted_batch(rows, generator, padded=0):
    """Texts from a fixed set of 8 sentences over ids 5..39; 15% masked (at least one per row); the last `padded`
    rows end in 4 padding tokens (id 0, attention 0)."""
    sentences = torch.randint(5, IN_CONTEXT, (8, T), generator=torch.Generator().manual_seed(7))
    original = sentences[torch.randint(0, 8, (rows,), generator=generator)]
    attention = torch.ones_like(original)
    if padded:
        attention[-padded:, -4:] = 0
        original[-padded:, -4:] = 0
    masked = (torch.rand(rows, T, generator=generator) < 0.15) & attention.bool()
    masked[:, 1] = True
    return as_batch(original, masked, attention)


class OutOfContextGenerator(nn.Module):
    """A planted generator head: samples only ids that never occur in a text (40..59), whatever its input."""

    def forward(self, hidden, word_embeddings):                       # (N, C) -> (N, V)
        logits = torch.full((hidden.shape[0], VOCAB), -30.0)
        logits[:, IN_CONTEXT:] = 0.0
        return logits + 0.0 * hidden.sum()                            # keeps the generator in the graph


class FixedLogits(nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, hidden, word_embeddings):
        return self.logits


def test_discriminator_reads_the_corrupted_ids_and_its_targets_are_aligned_with_them():
    model = pretraining_model()
    batch = planted_batch(6, torch.Generator().manual_seed(1), padded=2)
    masked_ids, original, masked, attention, segments = model_inputs(batch)
    seen = []
    model.discriminator.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    out = model(masked_ids, original, masked, attention, segments, torch.Generator().manual_seed(0))
    assert torch.equal(seen[0], out.corrupted_ids)                    # not the [MASK] input, not the originals
    assert not (out.corrupted_ids == MASK).any()
    assert torch.equal(out.corrupted_ids[~masked], original[~masked])           # only masked positions change
    assert torch.equal(out.replaced, out.corrupted_ids != original)             # label 1 exactly where it differs
    assert out.replaced.any() and not out.replaced[~masked].any()
    # a sample equal to the original is labelled original: a generator certain of the true token replaces nothing
    certain = torch.full((int(masked.sum()), VOCAB), -1e4)
    certain[torch.arange(certain.shape[0]), original[masked]] = 0.0
    model.generator_head = FixedLogits(certain)
    out = model(masked_ids, original, masked, attention, segments)
    assert torch.equal(out.corrupted_ids, original) and not out.replaced.any()


def test_rtd_loss_and_metrics_leave_padding_out_and_weight_the_two_losses():
    model = pretraining_model().eval()
    batch = planted_batch(6, torch.Generator().manual_seed(2), padded=3)
    masked_ids, original, masked, attention, segments = model_inputs(batch)
    loss, metrics = electra_loss(model, batch, 50.0, torch.Generator().manual_seed(0))
    out = model(masked_ids, original, masked, attention, segments, torch.Generator().manual_seed(0))
    real = attention.bool()
    rtd = F.binary_cross_entropy_with_logits(out.discriminator_logits[real], out.replaced[real].float())
    mlm = F.cross_entropy(out.generator_logits, original[masked])
    assert abs(float(loss.detach()) - float(mlm + 50.0 * rtd)) < 1e-4
    assert abs(metrics["rtd_loss"] - float(rtd)) < 1e-6 and metrics["tokens"] == float(real.sum())
    assert metrics["replaced"] == float(out.replaced[real].float().mean())
    accuracy = ((out.discriminator_logits[real] > 0) == out.replaced[real]).float().mean()
    assert abs(metrics["rtd_accuracy"] - float(accuracy)) < 1e-6
    # what the discriminator says at padding positions changes neither the loss nor the metrics
    shifted = dict(batch, input_ids=batch["input_ids"].masked_fill(~real, 7))
    again, metrics_again = electra_loss(model, shifted, 50.0, torch.Generator().manual_seed(0))
    assert abs(float(again) - float(loss)) < 1e-5
    assert all(abs(metrics_again[key] - value) < 1e-6 for key, value in metrics.items())


def test_generator_output_layer_is_the_shared_token_embedding():
    model = pretraining_model()
    batch = planted_batch(4, torch.Generator().manual_seed(3))
    masked_ids, original, masked, attention, segments = model_inputs(batch)
    before = model(masked_ids, original, masked, attention, segments, torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.discriminator.embeddings.token.weight[9] += 1.0          # the discriminator's table, one row
    after = model(masked_ids, original, masked, attention, segments, torch.Generator().manual_seed(0))
    assert (after.generator_logits - before.generator_logits)[:, 9].abs().min() > 0
    assert model.generator.embeddings.position is model.discriminator.embeddings.position


def rtd_accuracy_by_class(model, batch, rng_seed=0):
    """Held-out accuracy on the replaced and on the original real tokens, and the replaced rate."""
    model.eval()
    with torch.no_grad():
        out = model(*model_inputs(batch), torch.Generator().manual_seed(rng_seed))
    model.train()
    real = batch["attention_mask"].bool()
    replaced, says_replaced = out.replaced[real], out.discriminator_logits[real] > 0
    return (float(says_replaced[replaced].float().mean()), float((~says_replaced[~replaced]).float().mean()),
            float(replaced.float().mean()))


def train(model, steps, lr=1e-3, seed=1):
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        loss, _ = electra_loss(model, planted_batch(16, generator, padded=4), 50.0)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def test_discriminator_beats_the_prior_on_planted_out_of_context_replacements():
    """A planted generator replaces every masked token with an id that never occurs in a text: after 40 steps the
    discriminator finds >= 90% of the replaced tokens and keeps >= 99% of the originals (the prior, "all
    original", scores 0% and 100%; overall accuracy must beat 1 - replaced rate by half the rate)."""
    model = pretraining_model(generator_head=OutOfContextGenerator())
    held_out = planted_batch(64, torch.Generator().manual_seed(99), padded=16)
    assert rtd_accuracy_by_class(model, held_out)[0] < 0.9 or rtd_accuracy_by_class(model, held_out)[1] < 0.99
    train(model, 40)
    on_replaced, on_original, rate = rtd_accuracy_by_class(model, held_out)
    assert rate > 0.1 and on_replaced >= 0.9 and on_original >= 0.99
    overall = on_replaced * rate + on_original * (1 - rate)
    assert overall >= (1 - rate) + rate / 2


def test_discriminator_beats_the_prior_with_its_own_generator_on_a_small_planted_corpus():
    """Generator and discriminator trained together on 8 repeated sentences: the generator's early samples are
    wrong (a third of the vocabulary never occurs in a text), and after 60 steps the discriminator finds >= 50% of
    the replacements it meets and keeps >= 95% of the originals (the prior: 0% and 100%; measured 0.66 and 0.997)."""
    model = pretraining_model()
    held_out = planted_batch(64, torch.Generator().manual_seed(99), padded=16)
    train(model, 60)
    on_replaced, on_original, rate = rtd_accuracy_by_class(model, held_out)
    assert rate > 0.01 and on_replaced >= 0.5 and on_original >= 0.95
