import json
from importlib import resources
from pathlib import Path

import pytest
import torch

from bertkit.checkpoints.gpt2 import load_gpt2
from bertkit.cli import main

PRESETS = Path(str(resources.files("bertkit") / "presets" / "pretrain"))   # as files; by name in the others
SENTENCES = ["the cat sat on the mat.", "the dog sat on the log.", "a cat and a dog met on a mat.",
             "the big dog ran to the small cat.", "a red log lay on the blue mat."]
TINY = ["--encoder.hidden_size=32", "--encoder.num_layers=1", "--encoder.num_heads=2",
        "--encoder.max_position_embeddings=32", "--data.block_size=16", "--data.batch_size=4",
        "--data.heldout_fraction=0.1", "--vocab.min_frequency=1", "--train.eval_every=10",
        "--train.save_every=10", "--train.progress_bar=false"]


@pytest.fixture
def corpus(tmp_path):
    docs = ["\n".join(SENTENCES[(i + j) % 5] for j in range(3)) for i in range(20)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def test_pretrain_gpt_writes_a_gpt2_folder(tmp_path, corpus, capsys):
    out = tmp_path / "gpt"
    assert main(["pretrain", "--arch", "gpt", "--corpus", str(corpus), "--output", str(out),
                 "--config", str(PRESETS / "gpt-tiny.toml"), "--vocab-size", "300", "--max-steps", "20",
                 *TINY]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["arch"] == "gpt" and summary["steps"] == 20
    assert summary["eval_perplexity"] < 300 and summary["unigram_perplexity"] is not None
    assert json.loads((out / "run" / "config.effective.json").read_text())["encoder"]["hidden_size"] == 32
    checkpoint = load_gpt2(out)
    assert checkpoint.tokenizer.vocab_size == checkpoint.config.vocab_size <= 300   # a tiny corpus may fill fewer

    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
    ids = torch.tensor([checkpoint.tokenizer.encode("the cat sat on the mat.")])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, checkpoint.model(ids).logits, atol=1e-5, rtol=1e-4)

    assert main(["generate", "--model", str(out), "--prompt", "the cat", "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out.startswith("the cat")

    # Continue from the folder, keeping its tokenizer; a given BPE folder is used as is.
    again = tmp_path / "again"
    assert main(["pretrain", "--arch", "gpt", "--corpus", str(corpus), "--output", str(again), "--model", str(out),
                 "--max-steps", "2", *TINY]) == 0
    assert load_gpt2(again).tokenizer.backend.get_vocab() == checkpoint.tokenizer.backend.get_vocab()
    fresh = tmp_path / "fresh"
    assert main(["pretrain", "--arch", "gpt", "--corpus", str(corpus), "--output", str(fresh), "--vocab", str(out),
                 "--max-steps", "2", *TINY]) == 0
    assert not (fresh / "tokenizer").exists() and load_gpt2(fresh).config.vocab_size == checkpoint.config.vocab_size


@pytest.mark.parametrize("extra, message", [
    (["--objective", "mlm+nsp"], "--objective mlm+nsp is a masked-LM"),
    (["--masking", "whole-word"], "drop --masking"),
    (["--config", str(PRESETS / "tiny.toml")], "presets such as gpt-tiny"),
    (["--config", "tiny"], "presets such as gpt-tiny"),
    (["--data.masking=span"], "unknown key data.masking"),
    (["--data.block_size=64"], "block_size 64 > encoder.max_position_embeddings 32"),
])
def test_bert_only_settings_are_refused_with_gpt(tmp_path, corpus, capsys, extra, message):
    assert main(["pretrain", "--arch", "gpt", "--corpus", str(corpus), "--output", str(tmp_path / "o"),
                 "--vocab-size", "300", "--max-steps", "1", *TINY, *extra]) == 2
    assert message in capsys.readouterr().err


def test_gpt_preset_with_bert_arch_gets_a_hint(tmp_path, corpus, capsys):
    assert main(["pretrain", "--corpus", str(corpus), "--output", str(tmp_path / "o"),
                 "--config", str(PRESETS / "gpt-tiny.toml")]) == 2
    assert "--arch gpt" in capsys.readouterr().err


def test_a_new_gpt_run_into_an_earlier_runs_folder_trains_its_own_vocab(tmp_path, corpus):
    """--arch gpt kept its trained BPE vocab in <output>/tokenizer and the next run into that folder took it, whatever
    its corpus or --vocab-size. Reference: the BPE vocab trained alone on the second corpus."""
    from bertkit.tokenizer.bpe import train_bpe

    other = tmp_path / "other.txt"
    other.write_text("\n\n".join("\n".join(["我们今天去公园。", "今天天气很好，我们是中国人。"]) for _ in range(20)),
                     encoding="utf-8")
    out = tmp_path / "gpt"
    for text, size in ((corpus, 300), (other, 280)):
        assert main(["pretrain", "--arch", "gpt", "--corpus", str(text), "--output", str(out), "--config",
                     str(PRESETS / "gpt-tiny.toml"), "--vocab-size", str(size), "--max-steps", "1", *TINY]) == 0
    alone = train_bpe([other], vocab_size=280, min_frequency=1).backend.get_vocab()
    assert load_gpt2(out).tokenizer.backend.get_vocab() == alone
    assert not (out / "tokenizer").exists()       # kept for --resume only: a finished run removes it


def test_a_gpt_run_refuses_an_output_holding_a_finetuned_model(tmp_path, corpus, capsys):
    """--arch gpt wrote its GPT-2 weights over a fine-tuned folder (exit 0, a GPT-2 config.json beside a bertkit.json
    still saying classification); the BERT pre-training job's check now covers it, and a GPT run's own folder
    (no task, a run record) may be run into again."""
    from bertkit.checkpoints import save_checkpoint
    from bertkit.model.config import EncoderConfig
    from bertkit.model.encoder import Encoder
    from bertkit.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])})
    folder = tmp_path / "finetuned"
    save_checkpoint(folder, Encoder(EncoderConfig(vocab_size=6, hidden_size=32, num_layers=1, num_heads=2,
                                                  intermediate_size=64, max_position_embeddings=16)),
                    tokenizer, meta={"task": "classification"})
    weights = (folder / "model.safetensors").read_bytes()
    gpt = ["--arch", "gpt", "--corpus", str(corpus), "--config", str(PRESETS / "gpt-tiny.toml"), "--vocab-size", "300",
           "--max-steps", "1", *TINY]
    assert main(["pretrain", *gpt, "--output", str(folder)]) == 2
    assert "holds a classification model" in capsys.readouterr().err
    assert (folder / "model.safetensors").read_bytes() == weights
    for _ in range(2):
        assert main(["pretrain", *gpt, "--output", str(tmp_path / "gpt")]) == 0


def test_a_gpt_folder_converts_into_the_same_target_again(tmp_path, corpus, capsys):
    """convert refuses a target holding another model; a GPT-2 folder records no source there (no bertkit.json), so
    its own earlier conversion was refused as 'another model'. Another GPT still is."""
    gpt = ["--arch", "gpt", "--corpus", str(corpus), "--config", str(PRESETS / "gpt-tiny.toml"), "--vocab-size", "300",
           "--max-steps", "1", *TINY]
    assert main(["pretrain", *gpt, "--output", str(tmp_path / "gpt")]) == 0
    assert main(["pretrain", *gpt, "--output", str(tmp_path / "other"), "--train.seed=3"]) == 0
    for _ in range(2):
        assert main(["convert", str(tmp_path / "gpt"), str(tmp_path / "hf")]) == 0
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "other"), str(tmp_path / "hf")]) == 2
    assert "holds another model" in capsys.readouterr().err
