"""`bertkit quantize`: the int8 folder round trip, and the gate on a planted outlier (refuse, or keep the layer)."""
import json
import pickle
import random

import numpy as np
import pytest
import torch

import bertkit
import bertkit.distill.prune_job as prune_job
import bertkit.distill.quantize as quantize
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.distill.quantize import QuantizeConfig, QuantizeReport, run_quantize
from bertkit.distill.quantize_gate import INT8_KERNELS, Row, Sample, int8_variant, quantized_copy, sentence_vectors
from bertkit.errors import BertkitError
from bertkit.features import EncodeOptions
from bertkit.finetune.loaded import finetuned_model
from bertkit.model import Encoder, EncoderConfig
from bertkit.model.heads import SequenceClassificationHead
from bertkit.model.int8 import Int8Linear
from bertkit.model.precision import apply_precision
from bertkit.model.sentence import SentenceConfig, SentencePipeline, Whitening
from bertkit.tokenizer import Tokenizer

from distill_fixtures import make_model_folder, write_examples

WORDS = [f"w{i}" for i in range(400)]
LABELS = ["a", "b", "c"]


def build_folder(path, plant_outlier=False, whitening=False):
    """A 2-layer, 64-wide random model; initializer_range 0.2 so that every layer changes the output (with
    BERT's 0.02 a random model is all residual stream, and int8 of any layer changes nothing)."""
    torch.manual_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(vocab)}, lowercase=True)
    config = EncoderConfig(vocab_size=len(vocab), hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256,
                           max_position_embeddings=64, initializer_range=0.2)
    encoder = Encoder(config).eval()
    if plant_outlier:
        # One GELU channel of the last block at 300 for every token, read by nothing: per-token int8 of the
        # down projection's input then has a step of 300/127 and rounds every other channel to about zero.
        with torch.no_grad():
            encoder.blocks[1].ffn.up.bias[3] = 300.0
            encoder.blocks[1].ffn.down.weight[:, 3] = 0.0
    head = SequenceClassificationHead(config, len(LABELS))
    rng = np.random.default_rng(0)
    fitted = Whitening(rng.normal(size=64).astype(np.float32) * 0.1, rng.normal(size=(64, 32)).astype(np.float32),
                       100, pooling="cls") if whitening else None
    sentence = SentencePipeline(SentenceConfig(pooling="cls", normalize=True, max_length=24), [], fitted)
    save_checkpoint(path, encoder, tokenizer, {"classifier": head}, {"task": "classification", "labels": LABELS},
                    sentence=sentence)
    return path


def write_texts(path, count=60):
    rng = random.Random(0)
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30)))
                              for _ in range(count)) + "\n", encoding="utf-8")
    return path


def test_int8_folder_round_trip(tmp_path, monkeypatch):
    source = build_folder(tmp_path / "fp32", whitening=True)
    texts = write_texts(tmp_path / "texts.txt")
    report = run_quantize(QuantizeConfig(str(source), str(tmp_path / "int8"), texts=str(texts)))
    assert report.passed and report.kept == []
    folder = report.output
    names = {p.name for p in folder.iterdir()}
    assert "model.int8.safetensors" in names and "whitening.safetensors" in names
    assert not names & {"model.safetensors", "pytorch_model.bin"}      # transformers finds no float weights here
    assert report.sizes["int8"] <= 0.35 * report.sizes["fp32"]

    def no_pickle(*args, **kwargs):
        raise AssertionError("loading an int8 folder must not unpickle anything")
    monkeypatch.setattr(torch, "load", no_pickle)
    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    original, model = bertkit.load(source), bertkit.load(folder, precision="int8")
    assert model.precision == "int8" and isinstance(model.encoder.blocks[0].ffn.up, Int8Linear)
    assert model.encode_defaults == original.encode_defaults == {"pooling": "cls", "normalize": True, "max_length": 24}
    assert model.meta["labels"] == LABELS and model.meta["task"] == "classification"
    assert model.meta["whitening"] == original.meta["whitening"] and model.whitening is not None
    assert model.tokenizer.vocab_size == original.tokenizer.vocab_size
    text_list = texts.read_text(encoding="utf-8").splitlines()
    vectors, reference = model.encode(text_list, long_texts="truncate"), original.encode(text_list)
    assert vectors.shape == reference.shape == (60, 32)                  # whitened to 32 dims, as the source
    assert (vectors * reference).sum(1).min() >= 0.95                    # the gate's floor, on unit vectors
    # the reloaded folder computes exactly what the gate measured in process
    checkpoint = original.checkpoint
    options = EncodeOptions(max_length=24)
    for choice in INT8_KERNELS.values():
        reloaded = bertkit.load(folder, precision="fp32")                # then the kernel this machine may not pick
        apply_precision(reloaded.encoder, reloaded.heads, choice)
        encoder, _ = int8_variant(quantized_copy(checkpoint.encoder, [], True), checkpoint.heads, choice)
        sample = Sample(text_list, options, checkpoint.sentence)
        torch.testing.assert_close(sentence_vectors(reloaded.encoder, reloaded.tokenizer, sample)[0],
                                   sentence_vectors(encoder, checkpoint.tokenizer, sample)[0], atol=0, rtol=0)


def test_gate_refuses_a_planted_outlier(tmp_path, capsys):
    source = build_folder(tmp_path / "fp32", plant_outlier=True)
    texts = write_texts(tmp_path / "texts.txt")
    output = tmp_path / "int8"
    code = main(["quantize", "--model", str(source), "--output", str(output), "--texts", str(texts),
                 "--max-kept-layers", "0"])
    captured = capsys.readouterr()
    assert code == 2 and not output.exists()
    assert "FAIL: mean cosine < 0.99" in captured.out and "| fp32 |" in captured.out
    assert captured.err.count("\n") == 1 and "nothing written" in captured.err


def test_gate_keeps_the_sensitive_layer(tmp_path, capsys):
    source = build_folder(tmp_path / "fp32", plant_outlier=True)
    texts = write_texts(tmp_path / "texts.txt")
    assert main(["quantize", "--model", str(source), "--output", str(tmp_path / "int8"), "--texts", str(texts)]) == 0
    out = capsys.readouterr().out
    assert "kept in higher precision: blocks.1.ffn.down" in out
    meta = json.loads((tmp_path / "int8" / "bertkit.json").read_text(encoding="utf-8"))
    assert meta["quantization"]["kept_in_higher_precision"] == ["blocks.1.ffn.down"]
    model = bertkit.load(tmp_path / "int8")
    down = model.encoder.blocks[1].ffn.down
    assert isinstance(down, torch.nn.Linear) and down.weight.is_floating_point()     # float, not int8
    assert isinstance(model.encoder.blocks[1].ffn.up, Int8Linear)


def test_dev_gate_on_a_classifier(tmp_path, capsys):
    source = make_model_folder(tmp_path / "cls")
    dev = write_examples(tmp_path / "dev.jsonl", 24)
    assert main(["quantize", "--model", str(source), "--output", str(tmp_path / "int8"), "--dev", str(dev)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| int8")]
    assert len(rows) == 2 and all(row.endswith("| pass |") for row in rows)
    assert "24 examples of" in out
    # predictions of the int8 folder through the usual command
    predictions = tmp_path / "p.jsonl"
    assert main(["predict", "--model", str(tmp_path / "int8"), "--input", str(dev), "--output", str(predictions),
                 "--precision", "auto"]) == 0
    assert "precision auto -> int8" in capsys.readouterr().err
    assert len(predictions.read_text(encoding="utf-8").splitlines()) == 24


def test_dev_gate_needs_a_classifier(tmp_path, capsys):
    source = build_folder(tmp_path / "fp32")
    save_checkpoint(tmp_path / "plain", bertkit.load(source).encoder, bertkit.load(source).tokenizer)
    dev = write_examples(tmp_path / "dev.jsonl", 6)
    assert main(["quantize", "--model", str(tmp_path / "plain"), "--output", str(tmp_path / "q"),
                 "--dev", str(dev)]) == 2
    assert "pass --texts instead" in capsys.readouterr().err


def test_int8_folders_convert_back_and_refuse_training(tmp_path, capsys):
    source = build_folder(tmp_path / "fp32")
    run_quantize(QuantizeConfig(str(source), str(tmp_path / "int8"), texts=str(write_texts(tmp_path / "t.txt"))))
    assert main(["convert", str(tmp_path / "int8"), str(tmp_path / "back")]) == 0
    back, int8 = bertkit.load(tmp_path / "back"), bertkit.load(tmp_path / "int8", precision="fp32")
    assert (tmp_path / "back" / "model.safetensors").is_file() and back.precision == "fp32"
    ids = torch.randint(5, 400, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(back.encoder(ids).last_hidden_state, int8.encoder(ids).last_hidden_state)
    train = write_examples(tmp_path / "train.jsonl", 6)
    capsys.readouterr()
    assert main(["finetune", "--task", "classification", "--model", str(tmp_path / "int8"), "--train", str(train),
                 "--output", str(tmp_path / "ft"), "--epochs", "1", "--device", "cpu"]) == 2
    assert "int8" in capsys.readouterr().err


def test_precision_int8_needs_a_quantized_folder(tmp_path, capsys):
    source = build_folder(tmp_path / "fp32")
    texts = write_texts(tmp_path / "texts.txt")
    assert main(["encode", "--model", str(source), "--input", str(texts), "--output", str(tmp_path / "v.npy"),
                 "--precision", "int8"]) == 2
    assert "bertkit quantize" in capsys.readouterr().err
    assert not (tmp_path / "v.npy").exists()


def test_int8_folder_written_over_an_fp32_folder_keeps_no_float_weights(tmp_path):
    """Saving replaces a folder and carries over files only the old one had (run logs): never its weights, which
    are read before model.int8.safetensors and would silently load the fp32 model."""
    import shutil
    source = build_folder(tmp_path / "fp32")
    target = tmp_path / "target"
    texts = str(write_texts(tmp_path / "texts.txt"))
    run_quantize(QuantizeConfig(str(source), str(target), texts=texts))       # an earlier quantize run's folder...
    shutil.copy(source / "model.safetensors", target / "model.safetensors")   # ...holding float weights as well
    (target / "train_log.jsonl").write_text("{}\n", encoding="utf-8")
    report = run_quantize(QuantizeConfig(str(source), str(target), texts=texts))
    names = {p.name for p in report.output.iterdir()}
    assert "model.int8.safetensors" in names and "model.safetensors" not in names and "train_log.jsonl" in names
    assert bertkit.load(target).precision == "int8"


def test_an_output_holding_a_model_these_commands_did_not_write_is_refused_and_kept(tmp_path):
    """quantize, prune-heads and distill replaced whatever model their --output held (a colleague's fine-tuned
    folder, say); only their own source was refused. A folder the same command wrote may be written again."""
    import shutil

    from bertkit.distill.output import check_new_output

    source = build_folder(tmp_path / "fp32")
    other = shutil.copytree(source, tmp_path / "finetuned")
    weights = (other / "model.safetensors").read_bytes()
    with pytest.raises(BertkitError, match="holds a classification model that this command did not write"):
        run_quantize(QuantizeConfig(str(source), str(other), texts=str(write_texts(tmp_path / "texts.txt"))))
    assert (other / "model.safetensors").read_bytes() == weights
    for written_by in ("pruning", "distillation"):
        with pytest.raises(BertkitError, match="that this command did not write"):
            check_new_output(other, written_by, model=source)


def test_quantizing_a_sentence_transformers_folder_keeps_its_max_length_and_stores_int8(
        tmp_path, tiny_model_dir, make_sentence_transformers_folder):
    """Issue 17: quantize output lost the source's max_seq_length (256 became the 512 positions) and stored fp32
    weights. The source here is a sentence-transformers folder whose max_seq_length (16) is below its 64 positions."""
    from safetensors import safe_open

    source = make_sentence_transformers_folder(tiny_model_dir, tmp_path / "st", max_seq_length=16)
    texts = tmp_path / "texts.txt"
    rng = random.Random(0)
    words = ["the", "cat", "dog", "sat", "on", "mat", "hello", "world", "is"]
    texts.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(40)),
                     encoding="utf-8")
    assert main(["quantize", "--model", str(source), "--output", str(tmp_path / "int8"), "--texts", str(texts)]) == 0
    original, quantized = bertkit.load(source), bertkit.load(tmp_path / "int8")
    assert original.max_length == 16 and original.config.max_position_embeddings == 64
    assert quantized.max_length == 16 and quantized.encode_defaults == original.encode_defaults
    assert json.loads((tmp_path / "int8" / "bertkit.json").read_text())["encode"]["max_length"] == 16
    kept = json.loads((tmp_path / "int8" / "bertkit.json").read_text())["quantization"]["kept_in_higher_precision"]
    assert kept == []
    with safe_open(str(tmp_path / "int8" / "model.int8.safetensors"), "pt") as weights:
        dtypes = {name: str(weights.get_slice(name).get_dtype()) for name in weights.keys()}
    int8 = {name for name, dtype in dtypes.items() if dtype == "I8"}
    linears = {name for name in dtypes if name.endswith(".weight")
               and (".dense." in name or name.split(".")[-2] in ("query", "key", "value"))}
    assert len(linears) == 2 * 6 + 1                                     # 2 blocks of 6 Linears, and the pooler
    assert linears | {"embeddings.word_embeddings.weight"} == int8       # every Linear and the token table int8


def test_the_gate_quantizes_once_per_round_and_saves_what_it_measured(tmp_path, monkeypatch):
    """One quantization per gate round, measured in every kernel and saved as it is (it was quantized once per
    kernel and once more to save)."""
    import bertkit.distill.quantize_gate as gate

    calls = []
    quantize = gate.quantize_encoder

    def counted(encoder, keep=(), embeddings=True):
        calls.append(list(keep))
        return quantize(encoder, keep, embeddings=embeddings)
    monkeypatch.setattr(gate, "quantize_encoder", counted)
    source = build_folder(tmp_path / "fp32", plant_outlier=True)      # round 1 fails, round 2 keeps a layer
    report = run_quantize(QuantizeConfig(str(source), str(tmp_path / "int8"), texts=str(write_texts(tmp_path / "t.txt"))))
    assert report.passed and report.kept == ["blocks.1.ffn.down"]
    assert calls == [[], ["blocks.1.ffn.down"]]


def test_the_gates_dev_rows_are_cut_as_the_folders_evaluate_cuts_them(tmp_path, monkeypatch, capsys):
    """A classifier fine-tuned at max_length 4 (long_texts truncate): the accuracy the gate prints is measured on
    the token rows `bertkit evaluate` makes for that folder (the saved task options), not on 128-token rows;
    prune-heads measures the same way."""
    source = make_model_folder(tmp_path / "cls")
    checkpoint = load_checkpoint(source)
    save_checkpoint(source, checkpoint.encoder, checkpoint.tokenizer, checkpoint.heads,
                    {**checkpoint.meta, "task_options": {"max_length": 4, "long_texts": "truncate"}})
    dev = write_examples(tmp_path / "dev.jsonl", 12)          # 5 to 7 tokens a row
    measured = []

    def capture(real):
        def load(*args, **kwargs):
            measured.append(real(*args, **kwargs))
            return measured[-1]
        return load
    monkeypatch.setattr(quantize, "load_dev_set", capture(quantize.load_dev_set))
    monkeypatch.setattr(prune_job, "load_dev_set", capture(prune_job.load_dev_set))
    assert main(["quantize", "--model", str(source), "--output", str(tmp_path / "int8"), "--dev", str(dev)]) == 0
    assert main(["prune-heads", "--model", str(source), "--output", str(tmp_path / "p"), "--dev", str(dev),
                 "--per-layer", "1"]) == 0
    _, task = finetuned_model(source)
    reference = [f.input_ids for f in task.encode(measured[0].examples, quiet=True)]
    assert max(map(len, reference)) == 4
    assert [[f.input_ids for f in dev_set.features] for dev_set in measured] == [reference, reference]


def test_blank_texts_or_both_samples_are_one_line_errors(tmp_path, capsys):
    """--texts of blank lines was a numpy ValueError traceback; --dev with --texts silently ignored --texts."""
    source = make_model_folder(tmp_path / "cls")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\t\n", encoding="utf-8")
    dev = write_examples(tmp_path / "dev.jsonl", 6)
    for extra, message in ((["--texts", str(blank)], "blank.txt: no text to measure on"),
                           (["--dev", str(dev), "--texts", str(write_texts(tmp_path / "t.txt"))], "not both")):
        assert main(["quantize", "--model", str(source), "--output", str(tmp_path / "q"), *extra]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "q").exists()


def test_the_report_says_how_fast_int8_was_and_when_it_was_slower(tmp_path):
    """The table listed sentences/s per row but never compared them: an int8 folder slower than fp32 on this
    machine was written without a word. The ratio is the table's own numbers."""
    rows = [Row("fp32", 100.0, reference=True), Row("int8 (int_mm, fp32 elsewhere)", 80.0),
            Row("int8 (weights dequantized to bf16)", 90.0)]
    text = "\n".join(QuantizeReport(rows, [], "sample", tmp_path).lines())
    assert "speed: int8 (weights dequantized to bf16) 0.90x fp32" in text and "int8 is slower than fp32 here" in text
    rows[1].sentences_per_s = 250.0
    text = "\n".join(QuantizeReport(rows, [], "sample", tmp_path).lines())
    assert "speed: int8 (int_mm, fp32 elsewhere) 2.50x fp32" in text and "slower" not in text
