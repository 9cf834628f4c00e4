import json

import pytest
import torch
import torch.nn.functional as F

from bertkit.checkpoints import load_checkpoint
from bertkit.distill import losses
from bertkit.distill.augment import UNLABELED, masked_copies
from bertkit.distill.job import DistillConfig, run_distill
from bertkit.errors import BertkitError
from bertkit.finetune.classification import SequenceFeature
from bertkit.distill.student import every_kth_layer, student_from_teacher
from bertkit.model.encoder import Encoder

from distill_fixtures import make_model_folder, tiny_config, write_examples


def test_kd_loss_is_t_squared_kl_and_gradient_scales_as_one_over_t():
    torch.manual_seed(0)
    s, t = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    T = 3.0
    expected = (F.softmax(t / T, -1) * (F.log_softmax(t / T, -1) - F.log_softmax(s / T, -1))).sum(-1).mean() * T * T
    loss = losses.soft_target_loss(s, t, T)
    torch.testing.assert_close(loss, expected)
    # d/ds of T^2 KL = T (p_s - p_t) / N: the T^2 factor leaves gradients O(1/T) not O(1/T^2) (Hinton et al.)
    loss.backward()
    torch.testing.assert_close(s.grad, T * (F.softmax(s.detach() / T, -1) - F.softmax(t / T, -1)) / 4)
    assert float(losses.soft_target_loss(t, t, 2.0)) == pytest.approx(0.0, abs=1e-6)


def test_mse_logit_loss_and_alpha_mix():
    s, t = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 0.0]])
    assert float(losses.soft_target_loss(s, t, mode="mse")) == pytest.approx(2.5)
    hard = torch.tensor(4.0)
    mixed = losses.mixed_logit_loss(s, t, hard, alpha=0.25, temperature=1.0, mode="mse")
    assert float(mixed) == pytest.approx(0.25 * 2.5 + 0.75 * 4.0)


def test_layer_map_and_intermediate_losses():
    assert losses.uniform_layer_map(3, 6) == [2, 4, 6]
    with pytest.raises(ValueError):
        losses.uniform_layer_map(4, 6)
    hidden = [torch.randn(2, 5, 8) for _ in range(7)]
    student = [hidden[0], hidden[2], hidden[4], hidden[6]]
    assert float(losses.hidden_mse_loss(student, hidden, [2, 4, 6])) == 0.0
    assert float(losses.hidden_cosine_loss(student, hidden, [2, 4, 6])) == pytest.approx(0.0, abs=1e-6)
    proj = losses.make_projections(4, 8, 3)
    assert proj is not None and float(losses.hidden_mse_loss([h[..., :4] for h in student], hidden, [2, 4, 6], proj)) > 0
    maps = [torch.rand(2, 4, 5, 5).softmax(-1) for _ in range(6)]
    assert float(losses.attention_mse_loss([maps[1], maps[3], maps[5]], maps, [2, 4, 6])) == 0.0


def test_student_copies_every_kth_teacher_layer():
    assert every_kth_layer(6, 3) == [0, 2, 4]
    assert every_kth_layer(12, 6) == [0, 2, 4, 6, 8, 10]
    teacher = Encoder(tiny_config(num_layers=4))
    student = student_from_teacher(teacher, 2)
    assert student.config.num_layers == 2
    for s_block, t_index in zip(student.blocks, [0, 2]):
        for (name, p), q in zip(s_block.state_dict().items(), teacher.blocks[t_index].state_dict().values()):
            assert torch.equal(p, q), name
    assert torch.equal(student.embeddings.token.weight, teacher.embeddings.token.weight)
    assert student.blocks[0].attention.qkv.weight.data_ptr() != teacher.blocks[0].attention.qkv.weight.data_ptr()


@pytest.mark.parametrize("extra", [{}, {"hidden_weight": 1.0, "attention_weight": 1.0},
                                   {"hidden_weight": 1.0, "hidden_loss": "cosine", "logit_loss": "mse"},
                                   {"augment_copies": 2, "augment_mask_prob": 0.3}])
def test_distill_end_to_end_tiny(tmp_path, extra):
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    data = write_examples(tmp_path / "train.jsonl", 12)
    config = DistillConfig(teacher=str(teacher), student_layers=1, train=str(data), dev=str(data),
                           output=str(tmp_path / "student"), epochs=1, batch_size=6, progress_bar=False,
                           device="cpu", **extra)
    record = run_distill(config)
    assert "accuracy" in record["dev"]
    student = load_checkpoint(tmp_path / "student")
    assert student.config.num_layers == 1 and "classifier" in student.heads
    assert student.meta["labels"] == ["sport", "business", "arts"]


def test_embedding_distill_end_to_end_tiny(tmp_path):
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    texts = tmp_path / "texts.txt"
    texts.write_text("sport goal team\nbank profit\nfilm music star\nthe market\n", encoding="utf-8")
    record = run_distill(DistillConfig(teacher=str(teacher), student_layers=1, task="embedding", train=str(texts),
                                       dev=str(texts), output=str(tmp_path / "emb"), epochs=1, batch_size=2,
                                       progress_bar=False, device="cpu"))
    assert -1.0 <= record["dev"]["cosine"] <= 1.0
    assert load_checkpoint(tmp_path / "emb").config.num_layers == 1


def test_masked_copies_mask_only_ordinary_tokens_and_drop_the_label():
    features = [SequenceFeature([101, *range(1000, 1200), 102], [0] * 202, 1), SequenceFeature([101, 7, 102], [0] * 3, 0)]
    copies = masked_copies(features, 3, 0.25, mask_id=103, special_ids={0, 100, 101, 102, 103}, seed=5)
    assert len(copies) == 6 and all(c.label == UNLABELED for c in copies)
    first = copies[0]
    assert first.input_ids[0] == 101 and first.input_ids[-1] == 102 and len(first.input_ids) == 202
    masked = sum(a != b for a, b in zip(first.input_ids, features[0].input_ids))
    assert 25 <= masked <= 75 and all(t == 103 for a, t in zip(features[0].input_ids, first.input_ids) if a != t)
    assert copies[0].input_ids != copies[2].input_ids                          # each copy draws its own masks
    assert masked_copies(features, 3, 0.25, 103, {101, 102, 103}, seed=5) == \
        masked_copies(features, 3, 0.25, 103, {101, 102, 103}, seed=5)
    assert features[0].label == 1                                              # originals untouched


def test_augment_options_are_checked(tmp_path):
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    data = write_examples(tmp_path / "train.jsonl", 6)
    with pytest.raises(BertkitError, match="augment-mask-prob"):
        run_distill(DistillConfig(teacher=str(teacher), student_layers=1, train=str(data), output=str(tmp_path / "s"),
                                  augment_copies=1, augment_mask_prob=1.5, device="cpu"))
    with pytest.raises(BertkitError, match="classification"):
        run_distill(DistillConfig(teacher=str(teacher), student_layers=1, task="embedding", train=str(data),
                                  output=str(tmp_path / "s"), augment_copies=1, device="cpu"))


def test_transfer_texts_are_labeled_by_the_teacher_only(tmp_path):
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    data = write_examples(tmp_path / "train.jsonl", 12)
    transfer = tmp_path / "transfer.jsonl"      # a label the teacher does not know is ignored, not an error
    transfer.write_text("".join(f'{{"text": "unlabeled text number {i}", "label": "weather"}}\n' for i in range(12)),
                        encoding="utf-8")
    common = dict(teacher=str(teacher), student_layers=1, train=str(data), epochs=1, batch_size=6,
                  progress_bar=False, device="cpu")
    plain = run_distill(DistillConfig(output=str(tmp_path / "plain"), **common))
    record = run_distill(DistillConfig(output=str(tmp_path / "with"), transfer=str(transfer), **common))
    assert record["steps"] == 2 * plain["steps"]                     # 12 gold rows + 12 transfer rows
    assert load_checkpoint(tmp_path / "with").meta["distillation"]["transfer"] == str(transfer)
    with pytest.raises(BertkitError, match="missing.txt"):
        run_distill(DistillConfig(output=str(tmp_path / "bad"), transfer=str(tmp_path / "missing.txt"), **common))
