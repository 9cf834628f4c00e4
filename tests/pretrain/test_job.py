import json
from pathlib import Path

import pytest
import torch

from bertkit.cli import main
from bertkit.pretrain.objectives.mlm import MaskedLM
from pretrain_corpus import write_corpus

TINY_CONFIG = "tiny"   # a preset shipped with bertkit

TINY = ["--encoder.hidden_size=32", "--encoder.intermediate_size=64", "--encoder.num_layers=1",
        "--encoder.max_position_embeddings=64", "--data.max_length=32", "--data.batch_size=8",
        "--train.progress_bar=false", "--train.lr=1e-3", "--data.heldout_fraction=0.1"]


def pretrain(args, capsys=None) -> int:
    return main(["pretrain", "--config", TINY_CONFIG, *args, *TINY])


def losses(folder):
    return {r["step"]: r["loss"] for r in map(json.loads, (folder / "run" / "log.jsonl").read_text().splitlines())
            if "lr" in r}


def test_pretrain_cli_end_to_end_then_evaluate_and_continue(tmp_path, corpus, vocab_dir, capsys):
    out = tmp_path / "run"
    assert pretrain(["--corpus", str(corpus), "--output", str(out), "--vocab", str(vocab_dir), "--max-steps", "12",
                     "--objective", "mlm+sop", "--masking", "whole-word", "--train.eval_every=6"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 12 and "eval_mlm_accuracy" in summary
    for name in ("config.json", "model.safetensors", "vocab.txt", "bertkit.json", "metrics.json", "run/log.jsonl",
                 "run/loss.png", "run/config.effective.json", "run/versions.json"):
        assert (out / name).exists(), name
    for name in ("run/checkpoint", "shards"):   # a finished run leaves no resume state or shards in the model folder
        assert not (out / name).exists(), name
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForPreTraining"]

    assert main(["evaluate-mlm", "--model", str(out), "--corpus", str(corpus), "--max-length", "32"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(metrics) == {"loss", "mlm_accuracy", "perplexity", "tokens"} and metrics["tokens"] > 0

    # continued pre-training keeps the checkpoint's tokenizer (no --vocab) and lowers the domain loss
    more = tmp_path / "more"
    assert pretrain(["--corpus", str(corpus), "--output", str(more), "--model", str(out), "--max-steps", "20",
                     "--train.lr=3e-3"]) == 0
    capsys.readouterr()
    assert (more / "vocab.txt").read_text() == (out / "vocab.txt").read_text()
    assert main(["evaluate-mlm", "--model", str(more), "--corpus", str(corpus), "--max-length", "32"]) == 0
    after = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert after["loss"] < metrics["loss"]


def interrupt_at(monkeypatch, objective_class, call: int):
    """Make the objective's loss raise KeyboardInterrupt (a kill) at its call-th call; returns the real loss."""
    real_loss, calls = objective_class.loss, {"n": 0}

    def killed(self, model, batch):
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return real_loss(self, model, batch)

    monkeypatch.setattr(objective_class, "loss", killed)
    return real_loss


def test_kill_and_resume_continues_the_loss_curve(tmp_path, corpus, vocab_dir, monkeypatch):
    common = ["--corpus", str(corpus), "--vocab", str(vocab_dir), "--max-steps", "40", "--train.save_every=20",
              "--train.warmup_steps=4"]
    assert pretrain([*common, "--output", str(tmp_path / "full")]) == 0

    real_loss = interrupt_at(monkeypatch, MaskedLM, 27)
    assert pretrain([*common, "--output", str(tmp_path / "cut")]) == 130     # the CLI's "interrupted"
    assert (tmp_path / "cut" / "run" / "checkpoint" / "training_state.safetensors").is_file()   # kept for --resume
    assert (tmp_path / "cut" / "shards" / "manifest.json").is_file()
    monkeypatch.setattr(MaskedLM, "loss", real_loss)
    assert pretrain([*common, "--output", str(tmp_path / "cut"), "--resume"]) == 0
    full, cut = losses(tmp_path / "full"), losses(tmp_path / "cut")
    assert len(full) == 40
    for step in range(21, 41):
        assert cut[step] == pytest.approx(full[step], abs=1e-5), step


def test_bad_input_gives_one_line_errors(tmp_path, corpus, vocab_dir, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    binary = tmp_path / "weights.txt"
    binary.write_bytes(b"\x00\x93\xff" * 100)
    other_vocab = tmp_path / "other_vocab.txt"
    other_vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    model = tmp_path / "model"
    assert pretrain(["--corpus", str(corpus), "--output", str(model), "--vocab", str(vocab_dir),
                     "--max-steps", "2"]) == 0
    capsys.readouterr()
    cases = [
        (["--corpus", str(empty), "--vocab", str(vocab_dir)], "empty"),
        (["--corpus", str(binary), "--vocab", str(vocab_dir)], "binary"),
        (["--corpus", str(corpus), "--model", str(model), "--vocab", str(other_vocab)], "does not match the vocabulary"),
        (["--corpus", str(tmp_path / "nope.txt"), "--vocab", str(vocab_dir)], "file not found"),
    ]
    for i, (args, message) in enumerate(cases):
        assert pretrain([*args, "--output", str(tmp_path / f"bad{i}"), "--max-steps", "2"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("bertkit: error:") and message in err[0], err


def test_corpus_without_document_breaks_warns(tmp_path, vocab_dir, capsys):
    flat = tmp_path / "flat.txt"
    flat.write_text("\n".join(line for line in write_corpus(tmp_path / "c.txt").read_text().splitlines() if line))
    with pytest.warns(UserWarning, match="no blank lines between documents"):
        assert pretrain(["--corpus", str(flat), "--output", str(tmp_path / "o"), "--vocab", str(vocab_dir),
                         "--max-steps", "2", "--objective", "mlm+nsp"]) == 0


def test_heads_train_only_fits_an_mlm_head_to_an_encoder_without_one(tmp_path, corpus, tokenizer, capsys):
    """MiniLM-style folders have no MLM head: --heads.train_only fits one with the encoder frozen, after which
    evaluate-mlm works and continued pre-training can start from that folder."""
    import torch

    from bertkit.checkpoints import load_checkpoint, save_checkpoint
    from bertkit.model.config import EncoderConfig
    from bertkit.model.encoder import Encoder

    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                                    intermediate_size=64, max_position_embeddings=64))
    bare = tmp_path / "bare"
    save_checkpoint(bare, encoder, tokenizer)
    assert main(["evaluate-mlm", "--model", str(bare), "--corpus", str(corpus), "--max-length", "32"]) == 2
    assert "no MLM head" in capsys.readouterr().err

    fitted = tmp_path / "fitted"
    assert pretrain(["--corpus", str(corpus), "--output", str(fitted), "--model", str(bare), "--max-steps", "6",
                     "--heads.train_only=true"]) == 0
    assert "no MLM head" not in capsys.readouterr().err
    # without --heads.train_only the random new head trains with the encoder: said in one line, with the way out
    assert pretrain(["--corpus", str(corpus), "--output", str(tmp_path / "direct"), "--model", str(bare),
                     "--max-steps", "1"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "no MLM head" in line]
    assert len(said) == 1 and "--heads.train-only=true" in said[0], said
    before, after = load_checkpoint(bare).encoder.state_dict(), load_checkpoint(fitted)
    assert "mlm" in after.heads
    for name, tensor in after.encoder.state_dict().items():
        assert torch.equal(tensor, before[name]), name          # the encoder did not move
    capsys.readouterr()
    assert main(["evaluate-mlm", "--model", str(fitted), "--corpus", str(corpus), "--max-length", "32"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["loss"] > 0


def test_two_runs_with_the_same_seed_give_identical_weights(tmp_path, corpus):
    """Vocabulary training included (no --vocab): the same corpus and seed give the same vocab.txt and weights."""
    from safetensors.torch import load_file

    runs = [tmp_path / "a", tmp_path / "b"]
    for out in runs:
        assert pretrain(["--corpus", str(corpus), "--output", str(out), "--max-steps", "4", "--vocab.vocab_size=300",
                         "--train.seed=3"]) == 0
    vocab_a, vocab_b = ((out / "vocab.txt").read_bytes() for out in runs)
    assert vocab_a == vocab_b
    weights_a, weights_b = (load_file(str(out / "model.safetensors")) for out in runs)
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


class _Payload:
    """Unpickling this creates the marker file: proof that loading ran code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def test_resume_refuses_a_pickled_training_state_with_one_line(tmp_path, corpus, vocab_dir, capsys):
    import torch

    common = ["--corpus", str(corpus), "--vocab", str(vocab_dir), "--max-steps", "2", "--output", str(tmp_path / "o")]
    assert pretrain(common) == 0
    checkpoint = tmp_path / "o" / "run" / "checkpoint"
    checkpoint.mkdir()                           # the finished run removed its own state
    torch.save({"model": _Payload(tmp_path / "pwned")}, checkpoint / "training_state.pt")  # a crafted run folder
    capsys.readouterr()
    assert pretrain([*common, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pickle format" in err[0] and "without --resume" in err[0], err
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("args, message", [
    (["--encoder.num_layers=10000", "--encoder.hidden_size=1024", "--encoder.intermediate_size=4096"],
     "GiB to train, more than this machine's"),
    (["--encoder.num_layers=100000", "--encoder.hidden_size=16", "--encoder.num_heads=1",
      "--encoder.intermediate_size=16"],     # fits memory; trained a step, then failed saving (header too large)
     "--encoder.num-layers 100,000 is over 10,000: a checkpoint of more layers names more tensors than a "
     "safetensors header holds"),
    (["--train.lr=-1"], "train: lr must be a number > 0, got -1.0"),
    (["--data.mask_rate=2"], "data: mask_rate must be a number > 0 and <= 1, got 2.0"),
    (["--max-steps=-1"], "train: max_steps must be a number >= 1, got -1"),
])
def test_settings_no_run_could_use_are_one_line_before_anything_is_written(tmp_path, corpus, vocab_dir, capsys,
                                                                          args, message):
    """A model far over the machine's memory used to build layers for hours; a negative lr or a mask rate over 1
    ran, or failed with a traceback after the run folder was written."""
    assert main(["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--output", str(tmp_path / "m"),
                 "--vocab", str(vocab_dir), *TINY, *args]) == 2          # the bad setting last: it wins
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "m" / "run").exists() or "GiB" in message


def test_an_output_holding_another_model_is_refused_and_kept(tmp_path, corpus, vocab_dir, tokenizer, capsys):
    """Pre-training writes its model into --output itself: a fine-tuned or downloaded model there was silently
    replaced by the new (random-start) weights. An earlier pre-training run's folder may still be rerun."""
    from bertkit.checkpoints import save_checkpoint
    from bertkit.model.config import EncoderConfig
    from bertkit.model.encoder import Encoder

    encoder = Encoder(EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                                    intermediate_size=64, max_position_embeddings=64))
    finetuned, foreign = tmp_path / "finetuned", tmp_path / "foreign"
    save_checkpoint(finetuned, encoder, tokenizer, meta={"task": "classification"})
    save_checkpoint(foreign, encoder, tokenizer)
    (foreign / "bertkit.json").unlink()                 # as a folder downloaded from the hub holds
    for folder, held in ((finetuned, "holds a classification model"), (foreign, "holds a model that no bertkit")):
        weights = (folder / "model.safetensors").read_bytes()
        capsys.readouterr()
        assert pretrain(["--corpus", str(corpus), "--output", str(folder), "--vocab", str(vocab_dir),
                         "--max-steps", "2"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and held in err[0] and "--model" in err[0], err
        assert (folder / "model.safetensors").read_bytes() == weights and not (folder / "run").exists()

    rerun = tmp_path / "pretrained"
    for _ in range(2):
        assert pretrain(["--corpus", str(corpus), "--output", str(rerun), "--vocab", str(vocab_dir),
                         "--max-steps", "2"]) == 0
    # continuing the downloaded model into its own folder: it was told to pass the model as --model, which it did
    capsys.readouterr()
    assert pretrain(["--corpus", str(corpus), "--model", str(foreign), "--output", str(foreign),
                     "--max-steps", "2"]) == 2
    assert "is --model's own folder, which continued pre-training would write over" in capsys.readouterr().err


def test_evaluate_mlm_reads_gbk_and_masks_chinese_words_with_jieba(tmp_path, vocab_dir, capsys):
    """evaluate-mlm told a GBK corpus's user to pass --encoding, which it did not have; its whole-word masking had
    no segmenter, so on Chinese (every character a word) it was token masking under another name."""
    pytest.importorskip("jieba")
    model = tmp_path / "model"
    corpus = write_corpus(tmp_path / "corpus.txt")
    assert pretrain(["--corpus", str(corpus), "--output", str(model), "--vocab", str(vocab_dir),
                     "--max-steps", "2"]) == 0
    lines = ["我们今天去公园。", "今天天气很好，我们是中国人。", "中国人今天很好。", ""] * 30
    utf8, gbk = tmp_path / "zh.txt", tmp_path / "zh_gbk.txt"
    utf8.write_text("\n".join(lines), encoding="utf-8")
    gbk.write_bytes("\n".join(lines).encode("gb18030"))

    def evaluate(*args) -> dict:
        capsys.readouterr()
        assert main(["evaluate-mlm", "--model", str(model), "--max-length", "32", *args]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    token = evaluate("--corpus", str(utf8))
    assert evaluate("--corpus", str(gbk), "--encoding", "gb18030") == token
    assert evaluate("--corpus", str(utf8), "--masking", "whole-word") == token    # one character, one word
    words = evaluate("--corpus", str(utf8), "--masking", "whole-word", "--segmenter", "jieba")
    assert words != token and words["tokens"] > 0
    capsys.readouterr()
    assert main(["evaluate-mlm", "--model", str(model), "--corpus", str(utf8), "--max-length", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-length 2 is under 8" in err[0], err


def test_whole_word_masking_of_chinese_without_a_segmenter_is_said(tmp_path, vocab_dir, capsys):
    """--masking whole-word on Chinese without --data.segmenter jieba masked single characters (each is a word of
    its own in WordPiece) without a word; the run now says so once, and not when jieba segments the words."""
    pytest.importorskip("jieba")
    corpus = tmp_path / "zh.txt"
    corpus.write_text("\n".join(["我们今天去公园。", "今天天气很好，我们是中国人。", "中国人今天很好。", ""] * 20),
                      encoding="utf-8")
    said = {}
    for segmenter in ("none", "jieba"):
        assert pretrain(["--corpus", str(corpus), "--output", str(tmp_path / segmenter), "--vocab", str(vocab_dir),
                         "--max-steps", "1", "--masking", "whole-word", f"--data.segmenter={segmenter}"]) == 0
        said[segmenter] = [line for line in capsys.readouterr().err.splitlines() if "--data.segmenter jieba" in line]
    assert len(said["none"]) == 1 and "Chinese characters" in said["none"][0] and said["jieba"] == []


def test_a_new_run_into_an_earlier_runs_folder_trains_its_own_vocab(tmp_path, corpus):
    """The vocab a run trained stayed in <output>/tokenizer, and the next run into that folder took it whatever its
    corpus or --vocab-size: an English vocab for a Chinese corpus, silently. Reference: the vocab trained alone."""
    from bertkit.tokenizer import train_wordpiece

    chinese = tmp_path / "zh.txt"
    chinese.write_text("\n".join(["我们今天去公园。", "今天天气很好，我们是中国人。", "中国人今天很好。", ""] * 20),
                       encoding="utf-8")
    out = tmp_path / "run"
    for text, size in ((corpus, 300), (chinese, 200)):
        assert pretrain(["--corpus", str(text), "--output", str(out), "--max-steps", "1",
                         f"--vocab.vocab_size={size}"]) == 0
    train_wordpiece([chinese], vocab_size=200).save(tmp_path / "alone")
    assert (out / "vocab.txt").read_text(encoding="utf-8") == (tmp_path / "alone" / "vocab.txt").read_text("utf-8")
    assert not (out / "tokenizer").exists()       # kept for --resume only: a finished run removes it


def test_resume_refuses_changed_settings_and_takes_a_new_length(tmp_path, corpus, vocab_dir, monkeypatch, capsys):
    """--resume with another --train.lr ran on with the saved lr while run/config.effective.json named the new one;
    other changes (mask rate, masking) silently made a run that was not the interrupted one. They are refused
    in one line; how often it evaluates (or how long it goes) may change, and it is then the uninterrupted run."""
    common = ["--corpus", str(corpus), "--vocab", str(vocab_dir), "--train.save_every=5", "--train.warmup_steps=2",
              "--output", str(tmp_path / "cut")]
    real_loss = interrupt_at(monkeypatch, MaskedLM, 8)
    assert pretrain([*common, "--max-steps", "12"]) == 130
    monkeypatch.setattr(MaskedLM, "loss", real_loss)
    for changed, named in ((["--train.weight_decay=0.1"], "train.weight_decay 0.01 -> 0.1"),
                           (["--data.mask_rate=0.3"], "data.mask_rate 0.15 -> 0.3"),
                           (["--masking", "whole-word"], "data.masking 'token' -> 'whole-word'")):
        capsys.readouterr()
        assert pretrain([*common, "--max-steps", "12", "--resume", *changed]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and named in err[0] and "differ from the interrupted run" in err[0], err
    assert pretrain([*common, "--max-steps", "12", "--resume", "--train.eval_every=3"]) == 0
    assert pretrain(["--corpus", str(corpus), "--vocab", str(vocab_dir), "--train.save_every=5",
                     "--train.warmup_steps=2", "--output", str(tmp_path / "whole"), "--max-steps", "12"]) == 0
    cut, whole = losses(tmp_path / "cut"), losses(tmp_path / "whole")
    assert len(whole) == 12 and all(cut[step] == pytest.approx(whole[step], abs=1e-5) for step in range(6, 13))
