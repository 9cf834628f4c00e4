import pytest
import torch

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.pretrain.masking import IGNORE_INDEX
from bertkit.pretrain.objectives.mlm import PretrainingModel, evaluate_mlm, pretraining_loss

transformers = pytest.importorskip("transformers")


def tiny_model(with_pair: bool, vocab_size: int) -> PretrainingModel:
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                           max_position_embeddings=64)
    model = PretrainingModel(config, with_pair)
    for head in model.heads().values():
        head.apply(model.encoder._init_weights)
        for p in head.parameters():                   # non-zero biases, so a mapping mistake shows
            p.data.add_(0.01 * torch.randn_like(p))
    return model.eval()


def test_mlm_logits_only_at_masked_positions(tokenizer):
    model = tiny_model(False, tokenizer.vocab_size)
    ids = torch.randint(5, tokenizer.vocab_size, (3, 10))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[2, 7] = ids[0, 2], ids[2, 7]
    out = model(ids, torch.ones_like(ids), torch.zeros_like(ids), labels)
    assert out.mlm_logits.shape == (2, tokenizer.vocab_size) and out.pair_logits is None
    loss, metrics = pretraining_loss(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                             "token_type_ids": torch.zeros_like(ids), "labels": labels})
    assert loss.ndim == 0 and metrics["tokens"] == 30


@pytest.mark.parametrize("with_pair", [False, True])
def test_saved_folder_loads_in_transformers_with_identical_logits(tmp_path, tokenizer, with_pair):
    model = tiny_model(with_pair, tokenizer.vocab_size)
    save_checkpoint(tmp_path / "m", model.encoder, tokenizer, model.heads())
    ids = torch.randint(5, tokenizer.vocab_size, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    everywhere = torch.zeros_like(ids)
    with torch.no_grad():
        ours = model(ids, mask, types, everywhere)
        hf_class = transformers.BertForPreTraining if with_pair else transformers.BertForMaskedLM
        hf = hf_class.from_pretrained(tmp_path / "m").eval()
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    hf_mlm = theirs.prediction_logits if with_pair else theirs.logits
    keep = mask.bool()
    torch.testing.assert_close(ours.mlm_logits.view(2, 12, -1)[keep], hf_mlm[keep], atol=1e-5, rtol=1e-4)
    if with_pair:
        torch.testing.assert_close(ours.pair_logits, theirs.seq_relationship_logits, atol=1e-5, rtol=1e-4)
    reloaded = load_checkpoint(tmp_path / "m")
    assert set(reloaded.heads) == ({"mlm", "pair"} if with_pair else {"mlm"})


def test_held_out_evaluation_reports_the_pair_task_of_nsp_and_sop(tokenizer):
    """mlm+nsp / mlm+sop evaluated only the MLM: the held-out NSP/SOP loss and accuracy (Google's
    next_sentence_loss / next_sentence_accuracy) were missing. Reference: the pair head's logits over all pairs."""
    model = tiny_model(True, tokenizer.vocab_size)
    torch.manual_seed(1)
    batches = []
    for size in (3, 5):
        ids = torch.randint(5, tokenizer.vocab_size, (size, 10))
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[:, 4] = ids[:, 4]
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                        "token_type_ids": torch.zeros_like(ids),
                        "labels": labels, "pair_labels": torch.randint(0, 2, (size,))})
    metrics = evaluate_mlm(model, batches, torch.device("cpu"))
    with torch.no_grad():
        logits = torch.cat([model(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["labels"]).pair_logits
                            for b in batches])
    pair_labels = torch.cat([b["pair_labels"] for b in batches])
    expected = float(torch.nn.functional.cross_entropy(logits, pair_labels))
    assert metrics["pair_loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["pair_accuracy"] == pytest.approx(float((logits.argmax(-1) == pair_labels).float().mean()))
    assert "pair_loss" not in evaluate_mlm(tiny_model(False, tokenizer.vocab_size), batches, torch.device("cpu"))
