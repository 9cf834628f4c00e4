import json

import pytest
import torch
import torch.nn.functional as F

import bertkit

from bertkit.job_config import job_config
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.distill import losses
from bertkit.distill.augment import UNLABELED, masked_copies
from bertkit.distill.job import DistillConfig, run_distill
from bertkit.errors import BertkitError
from bertkit.finetune.classification import SequenceFeature
from bertkit.finetune.config import TaskOptions
from bertkit.distill import student as student_module
from bertkit.distill.student import every_kth_layer, student_from_teacher
from bertkit.model.encoder import Encoder
from bertkit.model.sentence import SentenceConfig, SentencePipeline

from bertkit.finetune.predict import evaluate_file
from distill_fixtures import WORDS, make_model_folder, tiny_config, write_examples


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
    maps = [torch.rand(2, 4, 5, 5).softmax(-1) for _ in range(6)]
    assert float(losses.attention_mse_loss([maps[1], maps[3], maps[5]], maps, [2, 4, 6])) == 0.0


def test_hidden_losses_by_hand_and_padding_ignored():
    """One layer, batch 1, 3 tokens of width 2; the third token is padding (a huge difference that must not count)."""
    teacher = [torch.zeros(1, 3, 2), torch.tensor([[[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]]])]
    student = [torch.zeros(1, 3, 2), torch.tensor([[[3.0, 0.0], [2.0, 2.0], [100.0, -100.0]]])]
    mask = torch.tensor([[1, 1, 0]])
    # per token, the mean over width of (s - t)^2: token 0 (4 + 0) / 2 = 2, token 1 (4 + 0) / 2 = 2 -> 2
    assert float(losses.hidden_mse_loss(student, teacher, [1], mask=mask)) == pytest.approx(2.0)
    # 1 - cos: token 0 parallel -> 0; token 1 cos((2, 2), (0, 2)) = 1 / sqrt(2) -> mean (1 - 0.7071) / 2
    assert float(losses.hidden_cosine_loss(student, teacher, [1], mask=mask)) == \
        pytest.approx((1 - 2 ** -0.5) / 2, abs=1e-6)
    assert losses.make_projections(2, 2, 1) is None                # equal widths: no projection
    assert losses.make_projections(4, 8, 3)[0].weight.shape == (8, 4)
    projection = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    with torch.no_grad():
        projection[0].weight.copy_(0.5 * torch.eye(2))
        projection[0].bias.zero_()
    # W = 0.5 I: token 0 (1.5, 0) vs (1, 0): 0.25 / 2 = 0.125; token 1 (1, 1) vs (0, 2): (1 + 1) / 2 = 1
    assert float(losses.hidden_mse_loss(student, teacher, [1], projection, mask)) == pytest.approx(0.5625)


def test_attention_loss_by_hand():
    """(B=1, H=2, T=2, T=2) maps; with the mask, the second query row is padding."""
    teacher = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]], [[0.5, 0.5], [1.0, 0.0]]]])
    student = torch.tensor([[[[0.0, 1.0], [0.0, 1.0]], [[0.5, 0.5], [0.0, 1.0]]]])
    # row 0: head 0 (1 + 1) / 2 = 1, head 1 0 -> 0.5 over heads; row 1: head 0 (0.25 + 0.25) / 2 = 0.25,
    # head 1 (1 + 1) / 2 = 1 -> 0.625
    assert float(losses.attention_mse_loss([student], [teacher], [1], torch.tensor([[1, 0]]))) == pytest.approx(0.5)
    assert float(losses.attention_mse_loss([student], [teacher], [1])) == pytest.approx((0.5 + 0.625) / 2)
    with pytest.raises(ValueError, match="heads"):
        losses.attention_mse_loss([student[:, :1]], [teacher], [1])


def test_student_copies_every_kth_teacher_layer_ending_at_the_top_one():
    """The copied head reads the top layer, so the student keeps it (it started from layers 0, k, 2k, ...: a
    MiniLM-L6 BBC classifier cut to 2 layers began at 22% accuracy, distilled to 44% in 40 steps; with the top
    layer it begins at 80% and reaches 93%); student layer m is teacher layer m * k, as the hidden-state loss
    maps them."""
    assert every_kth_layer(6, 3) == [1, 3, 5]
    assert every_kth_layer(12, 6) == [1, 3, 5, 7, 9, 11]
    assert every_kth_layer(6, 4) == [1, 2, 4, 5] and every_kth_layer(6, 1) == [5] and every_kth_layer(3, 3) == [0, 1, 2]
    for teacher_layers, student_layers in ((6, 3), (12, 4), (6, 2), (4, 4)):
        assert every_kth_layer(teacher_layers, student_layers) == \
            [m - 1 for m in losses.uniform_layer_map(student_layers, teacher_layers)]
    teacher = Encoder(tiny_config(num_layers=4))
    student = student_from_teacher(teacher, 2)
    assert student.config.num_layers == 2
    for s_block, t_index in zip(student.blocks, [1, 3]):
        for (name, p), q in zip(s_block.state_dict().items(), teacher.blocks[t_index].state_dict().values()):
            assert torch.equal(p, q), name
    assert torch.equal(student.embeddings.token.weight, teacher.embeddings.token.weight)
    assert student.blocks[0].attention.qkv.weight.data_ptr() != teacher.blocks[0].attention.qkv.weight.data_ptr()


TEXTS = [" ".join(WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(4)) for i in range(12)]   # 6 tokens each


def _forward(encoder, head, tokenizer):
    """Logits, hidden states and attention maps over TEXTS (all the same length: no padding)."""
    ids = torch.tensor(tokenizer.encode_batch(TEXTS).input_ids)
    with torch.no_grad():
        out = encoder.eval()(ids, torch.ones_like(ids), torch.zeros_like(ids), output_hidden_states=True,
                             output_attentions=True)
        pooled = out.pooled_output if out.pooled_output is not None else out.last_hidden_state[:, 0]
        return head.eval()(pooled), out.hidden_states, out.attentions


def _gaps(outputs, teacher) -> dict:
    """How far a one-layer student is from the two-layer teacher: logits (KL at T=1), its layer against the
    teacher's second (hidden MSE, attention MSE)."""
    return {"kl": float(losses.soft_target_loss(outputs[0], teacher[0], 1.0)),
            "hidden": float(losses.hidden_mse_loss(outputs[1], teacher[1], [2])),
            "attention": float(losses.attention_mse_loss(outputs[2], teacher[2], [2]))}


VARIANTS = {"logits": {}, "hidden": {"hidden_weight": 1.0}, "attention": {"attention_weight": 1.0},
            "cosine_mse": {"hidden_weight": 1.0, "hidden_loss": "cosine", "logit_loss": "mse"}}


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """The tiny random teacher with its head scaled x30, so that its logits differ visibly between texts."""
    folder = make_model_folder(tmp_path_factory.mktemp("teacher") / "teacher", layers=2)
    teacher = load_checkpoint(folder)
    with torch.no_grad():
        for module in teacher.heads["classifier"].modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.mul_(30.0)
    save_checkpoint(folder, teacher.encoder, teacher.tokenizer, teacher.heads, teacher.meta)
    return folder


def test_each_loss_variant_pulls_the_student_toward_the_teacher(teacher_dir, tmp_path, monkeypatch):
    """Pure distillation (alpha 1, no dev set: the last student is saved). On the training texts every variant's
    student is closer to the teacher in KL than the student it started from by at least half, and a hidden-state
    or attention term brings its own quantity closer than logit-only distillation does (measured: hidden 2.6e-5 vs
    1.9e-4, attention 4.65e-6 vs 4.99e-6). The student starts from the teacher's first layer here, far from the
    teacher (the default start, its top layer, is already within 1e-4 of this tiny random teacher)."""
    monkeypatch.setattr(student_module, "every_kth_layer", lambda teacher_layers, student_layers: [0])
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("".join(json.dumps({"text": t, "label": "sport"}) + "\n" for t in TEXTS), encoding="utf-8")
    teacher = load_checkpoint(teacher_dir)
    reference = _forward(teacher.encoder, teacher.heads["classifier"], teacher.tokenizer)
    start = _gaps(_forward(student_from_teacher(teacher.encoder, 1, [0]), teacher.heads["classifier"],
                           teacher.tokenizer), reference)
    gaps = {}
    for name, extra in VARIANTS.items():
        run_distill(job_config(DistillConfig, teacher=str(teacher_dir), student_layers=1, train=str(train_file),
                                  output=str(tmp_path / name), epochs=8, batch_size=6, lr=1e-4, alpha=1.0,
                                  warmup_ratio=0.0, progress_bar=False, device="cpu", **extra))
        student = load_checkpoint(tmp_path / name)
        assert student.config.num_layers == 1 and student.meta["labels"] == ["sport", "business", "arts"]
        gaps[name] = _gaps(_forward(student.encoder, student.heads["classifier"], student.tokenizer), reference)
        assert gaps[name]["kl"] < 0.5 * start["kl"], (name, gaps[name], start)
    assert gaps["hidden"]["hidden"] < 0.5 * gaps["logits"]["hidden"], gaps
    assert gaps["attention"]["attention"] < gaps["logits"]["attention"], gaps


@pytest.mark.parametrize("extra", [{"hidden_weight": 1.0, "attention_weight": 1.0},
                                   {"augment_copies": 2, "augment_mask_prob": 0.3}])
def test_distilled_dev_metrics_are_the_saved_students(teacher_dir, tmp_path, extra):
    """The recorded dev accuracy is what `bertkit evaluate` measures on the saved student (the best epoch)."""
    data = write_examples(tmp_path / "train.jsonl", 12)
    record = run_distill(job_config(DistillConfig, teacher=str(teacher_dir), student_layers=1, train=str(data), dev=str(data),
                                       output=str(tmp_path / "student"), epochs=2, batch_size=6, lr=1e-3,
                                       progress_bar=False, device="cpu", **extra))
    assert record["dev"]["accuracy"] == pytest.approx(evaluate_file(tmp_path / "student", data)["accuracy"], abs=1e-9)
    assert load_checkpoint(tmp_path / "student").meta["dev_metrics"] == record["dev"]


def test_embedding_distill_end_to_end_tiny(tmp_path):
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    texts = tmp_path / "texts.txt"
    lines = ["sport goal team", "bank profit", "film music star", "the market"]
    texts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    record = run_distill(job_config(DistillConfig, teacher=str(teacher), student_layers=1, task="embedding", train=str(texts),
                                       dev=str(texts), output=str(tmp_path / "emb"), epochs=1, batch_size=2,
                                       progress_bar=False, device="cpu"))
    assert load_checkpoint(tmp_path / "emb").config.num_layers == 1
    # the recorded dev cosine is the saved student's mean-pooled vectors against the teacher's (same width)
    student = bertkit.load(tmp_path / "emb").encode(lines, pooling="mean", normalize=True)
    reference = bertkit.load(teacher).encode(lines, pooling="mean", normalize=True)
    assert record["dev"]["cosine"] == pytest.approx(float((student * reference).sum(1).mean()), abs=1e-5)


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
        run_distill(job_config(DistillConfig, teacher=str(teacher), student_layers=1, train=str(data), output=str(tmp_path / "s"),
                                  augment_copies=1, augment_mask_prob=1.5, device="cpu"))
    with pytest.raises(BertkitError, match="classification"):
        run_distill(job_config(DistillConfig, teacher=str(teacher), student_layers=1, task="embedding", train=str(data),
                                  output=str(tmp_path / "s"), augment_copies=1, device="cpu"))
    with pytest.raises(BertkitError, match="--hidden-weight and --attention-weight are for --task classification"):
        run_distill(job_config(DistillConfig, teacher=str(teacher), student_layers=1, task="embedding", train=str(data),
                               output=str(tmp_path / "s"), hidden_weight=1.0, device="cpu"))


def test_transfer_texts_are_labeled_by_the_teacher_only(tmp_path):
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    data = write_examples(tmp_path / "train.jsonl", 12)
    transfer = tmp_path / "transfer.jsonl"      # a label the teacher does not know is ignored, not an error
    transfer.write_text("".join(f'{{"text": "unlabeled text number {i}", "label": "weather"}}\n' for i in range(12)),
                        encoding="utf-8")
    common = dict(teacher=str(teacher), student_layers=1, train=str(data), epochs=1, batch_size=6,
                  progress_bar=False, device="cpu")
    plain = run_distill(job_config(DistillConfig, output=str(tmp_path / "plain"), **common))
    record = run_distill(job_config(DistillConfig, output=str(tmp_path / "with"), transfer=str(transfer), **common))
    assert record["steps"] == 2 * plain["steps"]                     # 12 gold rows + 12 transfer rows
    assert load_checkpoint(tmp_path / "with").meta["distillation"]["transfer"] == str(transfer)
    with pytest.raises(BertkitError, match="missing.txt"):
        run_distill(job_config(DistillConfig, output=str(tmp_path / "bad"), transfer=str(tmp_path / "missing.txt"), **common))


def test_the_student_keeps_its_run_max_length_and_the_teachers_long_texts(teacher_dir, tmp_path):
    """The student folder records the task options it was trained and measured with: evaluate re-measures the
    recorded dev metrics (loss included) with texts cut at --max-length, not the default 128 tokens."""
    teacher = load_checkpoint(teacher_dir)
    teacher.meta["task_options"] = {"max_length": 64, "long_texts": "truncate"}
    save_checkpoint(teacher_dir.parent / "cutting", teacher.encoder, teacher.tokenizer, teacher.heads, teacher.meta)
    data = write_examples(tmp_path / "train.jsonl", 12)         # 5 to 7 tokens a text: max_length 5 cuts most
    record = run_distill(job_config(DistillConfig, teacher=str(teacher_dir.parent / "cutting"), student_layers=1,
                                    train=str(data), dev=str(data), output=str(tmp_path / "student"), epochs=1,
                                    batch_size=6, max_length=5, progress_bar=False, device="cpu"))
    saved = TaskOptions.saved(load_checkpoint(tmp_path / "student").meta)
    assert saved == TaskOptions(max_length=5, long_texts="truncate")
    again = evaluate_file(tmp_path / "student", data)
    assert record["dev"] == pytest.approx({k: again[k] for k in record["dev"]}, abs=1e-6)


@pytest.mark.parametrize("extra, message", [({"student_layers": 3}, "--student-layers 3: a student needs 1..2"),
                                            ({"student_layers": 2, "hidden_weight": 1.0, "teacher_layers": 3},
                                             "do not divide"),
                                            ({"student_layers": 2, "attention_weight": 1.0, "student_heads": 2},
                                             "student layer 0 has 2 heads, teacher layer 0 has 4")])
def test_student_shapes_the_losses_cannot_use_are_one_line_errors_before_training(tmp_path, extra, message):
    extra = dict(extra)
    teacher = make_model_folder(tmp_path / "teacher", layers=extra.pop("teacher_layers", 2))
    heads = extra.pop("student_heads", None)
    if heads:
        student = load_checkpoint(teacher)
        save_checkpoint(tmp_path / "student", Encoder(tiny_config(num_heads=heads)), student.tokenizer, {}, {})
        extra = {"student": str(tmp_path / "student"), **{k: v for k, v in extra.items() if k != "student_layers"}}
    data = write_examples(tmp_path / "train.jsonl", 6)
    with pytest.raises(BertkitError, match=message):
        run_distill(job_config(DistillConfig, teacher=str(teacher), train=str(data), output=str(tmp_path / "s"),
                               epochs=1, device="cpu", progress_bar=False, **extra))
    assert not (tmp_path / "s" / "model.safetensors").exists()


@pytest.mark.parametrize("task", ["classification", "embedding"])
def test_rows_longer_than_the_students_positions_are_cut_to_them(tmp_path, capsys, task):
    """A --student with an 8-position table was an IndexError traceback on 26-token rows at --max-length 128; the
    length is now cut to the smaller table, said in one line and saved, so predict cuts texts the same way."""
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    checkpoint = load_checkpoint(teacher)
    tokenizer = checkpoint.tokenizer
    save_checkpoint(teacher, checkpoint.encoder, tokenizer, checkpoint.heads, checkpoint.meta,
                    sentence=SentencePipeline(SentenceConfig(max_length=24)))
    save_checkpoint(tmp_path / "short", Encoder(tiny_config(num_layers=1, max_position_embeddings=8)), tokenizer)
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps({"text": " ".join(WORDS * 2), "label": label}) + "\n"
                            for label in ("sport", "business", "arts")), encoding="utf-8")
    run_distill(job_config(DistillConfig, teacher=str(teacher), student=str(tmp_path / "short"), task=task,
                           train=str(data), output=str(tmp_path / "s"), epochs=1, progress_bar=False, device="cpu"))
    assert "--max-length 128 is cut to 8, the positions of --student" in capsys.readouterr().err
    if task == "classification":
        assert TaskOptions.saved(load_checkpoint(tmp_path / "s").meta).max_length == 8
        assert len(evaluate_file(tmp_path / "s", data)) > 0
    else:           # the teacher encodes at most 24 tokens: the student at most its 8
        assert bertkit.load(tmp_path / "s").encode([" ".join(WORDS * 2)]).shape == (1, 32)


def test_embedding_student_learns_the_teachers_own_pooling_by_default(tmp_path):
    """A CLS-pooling teacher: the student learned the teacher's mean-pooled vectors and was saved with mean pooling,
    so its vectors were not the ones the teacher folder encodes; the recorded dev cosine is now against them."""
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    checkpoint = load_checkpoint(teacher)
    save_checkpoint(teacher, checkpoint.encoder, checkpoint.tokenizer, checkpoint.heads, checkpoint.meta,
                    sentence=SentencePipeline(SentenceConfig(pooling="cls", normalize=True)))
    lines = ["sport goal team", "bank profit", "film music star", "the market"]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    record = run_distill(job_config(DistillConfig, teacher=str(teacher), student_layers=1, task="embedding",
                                    train=str(texts), dev=str(texts), output=str(tmp_path / "emb"), epochs=1,
                                    batch_size=2, progress_bar=False, device="cpu"))
    student = bertkit.load(tmp_path / "emb")
    assert student.encode_defaults["pooling"] == "cls"
    cosine = float((student.encode(lines) * bertkit.load(teacher).encode(lines)).sum(1).mean())
    assert record["dev"]["cosine"] == pytest.approx(cosine, abs=1e-5)
    with pytest.raises(BertkitError, match="--pooling foo: choose one of"):
        run_distill(job_config(DistillConfig, teacher=str(teacher), student_layers=1, task="embedding",
                               train=str(texts), output=str(tmp_path / "bad"), pooling="foo", device="cpu"))


def test_embedding_student_of_a_teacher_with_dense_layers_says_what_it_learns(tmp_path, capsys, tiny_model_dir,
                                                                              make_sentence_transformers_folder):
    """A sentence-transformers teacher with a Dense layer (32 -> 16): the student learns the pooled 32-wide vectors
    before it and is saved without it, which the user is told (its vectors are not the teacher's 16-wide ones)."""
    teacher = make_sentence_transformers_folder(tiny_model_dir, tmp_path / "st", dense=[(32, 16, "Tanh")])
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\nhello world\n", encoding="utf-8")
    run_distill(job_config(DistillConfig, teacher=str(teacher), student_layers=1, task="embedding", train=str(texts),
                           output=str(tmp_path / "emb"), epochs=1, progress_bar=False, device="cpu"))
    assert "pooled vectors, before its dense layers" in capsys.readouterr().err
    assert bertkit.load(teacher).encode(["hello"]).shape == (1, 16)
    assert bertkit.load(tmp_path / "emb").encode(["hello"]).shape == (1, 32)


@pytest.mark.parametrize("field, value", [("temperature", 0.0), ("temperature", -1.0), ("alpha", 1.5),
                                          ("alpha", -0.5), ("hidden_weight", -1.0), ("attention_weight", -2.0)])
def test_distillation_settings_out_of_range_are_one_line_before_anything_runs(tmp_path, capsys, field, value):
    """temperature 0 made every loss NaN (three roll-backs, then 'lower the lr'); the others trained silently."""
    teacher = make_model_folder(tmp_path / "teacher", layers=2)
    data = write_examples(tmp_path / "train.jsonl", 6)
    flag = "--" + field.replace("_", "-")
    assert main(["distill", "--teacher", str(teacher), "--student-layers", "1", "--train", str(data), "--output",
                 str(tmp_path / "s"), "--max-steps", "2", flag, str(value)]) == 2
    assert f"{field} must be a number" in capsys.readouterr().err and not (tmp_path / "s").exists()
