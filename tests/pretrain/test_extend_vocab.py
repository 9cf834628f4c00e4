"""`bertkit vocab extend` (bertkit.pretrain.extend_vocab): a corpus's [UNK] characters become new tokens with new
embedding rows; old ids and outputs on text the old vocab covered stay bit for bit; transformers reads the folder."""
from __future__ import annotations

import json

import pytest
import torch

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.model import Encoder, EncoderConfig
from bertkit.model.heads import MaskedLMHead
from bertkit.pretrain.extend_vocab import extend_vocab, missing_characters
from bertkit.tokenizer import Tokenizer

# 你 好 世 界 are in the tiny vocab; 中 国 人 are not (中 three times, 国 twice, 人 once); ！ is full-width
# punctuation the vocab lacks (twice).
CORPUS = ["你好中国！", "中国 hello world", "中 人", "the cat sat on the mat！"]
OLD_TEXTS = ["hello world, the cat sat on the mat", "你好世界", "dog is 42!"]


@pytest.fixture(scope="module")
def mlm_model_dir(tmp_path_factory, tiny_vocab_file):
    """The tiny random BERT with a masked-LM head whose bias is not zero (so a wrong copy would show)."""
    torch.manual_seed(1)
    tokenizer = Tokenizer.from_vocab_file(tiny_vocab_file, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                           intermediate_size=64, max_position_embeddings=64)
    head = MaskedLMHead(config)
    head.bias.data.normal_()
    folder = tmp_path_factory.mktemp("models") / "tiny_mlm"
    save_checkpoint(folder, Encoder(config).eval(), tokenizer, {"mlm": head})
    return folder


@pytest.fixture(scope="module")
def extended(mlm_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("extended") / "model"
    return extend_vocab(mlm_model_dir, CORPUS, out, min_count=2), out


def test_missing_characters_counts_only_isolated_unknown_characters(mlm_model_dir):
    tokenizer = load_checkpoint(mlm_model_dir).tokenizer
    added, before, after = missing_characters(tokenizer, CORPUS, min_count=2)
    assert added == ["中", "国", "！"]          # most frequent first; 人 (once) stays below min_count
    chars = sum(len(line.replace(" ", "")) for line in CORPUS)
    assert before == pytest.approx(8 / chars)   # 中 x3, 国 x2, ！ x2, 人 x1
    assert after == pytest.approx(1 / chars)    # only 人


def test_new_characters_tokenize_as_single_new_ids(extended, mlm_model_dir):
    result, out = extended
    old = Tokenizer.from_folder(mlm_model_dir)
    new = Tokenizer.from_folder(out)
    assert (result.old_size, result.new_size) == (old.vocab_size, old.vocab_size + 3)
    assert new.vocab_size == result.new_size
    assert [new.token_to_id(c) for c in "中国！"] == [old.vocab_size, old.vocab_size + 1, old.vocab_size + 2]
    assert new.tokenize("你好中国人！") == ["你", "好", "中", "国", "[UNK]", "！"]
    assert old.tokenize("你好中国人！") == ["你", "好", "[UNK]", "[UNK]", "[UNK]", "[UNK]"]


def test_old_vocab_text_keeps_its_ids_and_outputs_bit_for_bit(extended, mlm_model_dir):
    _, out = extended
    before, after = load_checkpoint(mlm_model_dir), load_checkpoint(out)
    old_ids = before.tokenizer.encode_batch(OLD_TEXTS)
    new_ids = after.tokenizer.encode_batch(OLD_TEXTS)
    assert old_ids.input_ids == new_ids.input_ids
    ids, mask = _tensors(before.tokenizer, old_ids)
    with torch.no_grad():
        h_old = before.encoder(ids, attention_mask=mask).last_hidden_state
        h_new = after.encoder(ids, attention_mask=mask).last_hidden_state
        assert torch.equal(h_old, h_new)
        mlm_old = before.heads["mlm"](h_old, before.encoder.embeddings.token.weight)
        mlm_new = after.heads["mlm"](h_new, after.encoder.embeddings.token.weight)
    assert mlm_new.shape[-1] == mlm_old.shape[-1] + 3
    assert torch.equal(mlm_new[..., :mlm_old.shape[-1]], mlm_old)


def test_new_rows_are_the_mean_of_the_old_rows(extended, mlm_model_dir):
    _, out = extended
    before, after = load_checkpoint(mlm_model_dir), load_checkpoint(out)
    old_rows = before.encoder.embeddings.token.weight
    new_rows = after.encoder.embeddings.token.weight
    assert torch.equal(new_rows[:old_rows.shape[0]], old_rows)
    for row in new_rows[old_rows.shape[0]:]:
        torch.testing.assert_close(row, old_rows.mean(dim=0))
    bias_old, bias_new = before.heads["mlm"].bias, after.heads["mlm"].bias
    torch.testing.assert_close(bias_new[bias_old.shape[0]:], bias_old.mean().expand(3))
    assert json.loads((out / "config.json").read_text())["vocab_size"] == new_rows.shape[0]


def test_transformers_reads_the_extended_folder_with_identical_outputs(extended):
    transformers = pytest.importorskip("transformers")
    _, out = extended
    ours = load_checkpoint(out)
    batch = ours.tokenizer.encode_batch(["你好中国！", "中国 hello"])
    ids, mask = _tensors(ours.tokenizer, batch)
    reference = transformers.BertForMaskedLM.from_pretrained(out).eval()
    with torch.no_grad():
        hidden = ours.encoder(ids, attention_mask=mask).last_hidden_state
        logits = ours.heads["mlm"](hidden, ours.encoder.embeddings.token.weight)
        expected = reference(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)


def test_cli_extends_a_folder_and_reports_the_unk_share(mlm_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    out = tmp_path / "ext"
    assert main(["vocab", "extend", "--model", str(mlm_model_dir), "--corpus", str(corpus), "--output", str(out),
                 "--min-count", "1"]) == 0
    err = capsys.readouterr().err
    assert "added 4 tokens" in err and "中国！人" in err
    assert Tokenizer.from_folder(out).tokenize("人") == ["人"]


def test_cli_missing_corpus_is_one_line_exit_2_and_writes_nothing(mlm_model_dir, tmp_path, capsys):
    out = tmp_path / "ext"
    code = main(["vocab", "extend", "--model", str(mlm_model_dir), "--corpus", str(tmp_path / "nope.txt"),
                 "--output", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "nope.txt" in err
    assert not out.exists()


def _tensors(tokenizer, batch):
    padded = tokenizer.pad_to_tensors(batch)
    return padded["input_ids"], padded["attention_mask"]


def test_cli_refuses_an_empty_corpus_and_an_output_holding_another_model(mlm_model_dir, tmp_path, capsys):
    """An empty corpus said 'added 0 tokens' and wrote a copy; an --output holding another model (a fine-tuned
    one) was replaced by the extended model. Both are one line, exit 2, nothing written; --output = --model
    extends in place."""
    empty, corpus = tmp_path / "empty.txt", tmp_path / "corpus.txt"
    empty.write_text("\n \n", encoding="utf-8")
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    other = tmp_path / "other"
    save_checkpoint(other, Encoder(EncoderConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2,
                                                 intermediate_size=32)), None, meta={"task": "classification"})
    weights = (other / "model.safetensors").read_bytes()
    for corpus_file, output, message in ((empty, tmp_path / "new", "the corpus is empty"),
                                         (corpus, other, "holds another model")):
        capsys.readouterr()
        assert main(["vocab", "extend", "--model", str(mlm_model_dir), "--corpus", str(corpus_file), "--output",
                     str(output)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "new").exists() and (other / "model.safetensors").read_bytes() == weights

    in_place = tmp_path / "in_place"
    save_checkpoint(in_place, *(lambda c: (c.encoder, c.tokenizer, c.heads))(load_checkpoint(mlm_model_dir)))
    assert main(["vocab", "extend", "--model", str(in_place), "--corpus", str(corpus), "--output", str(in_place),
                 "--min-count", "1"]) == 0
    assert Tokenizer.from_folder(in_place).tokenize("人") == ["人"]
    # the same corpus again: nothing is missing, so the folder is not rewritten in place (it was, while the line
    # said "the model unchanged"); a new --output gets a copy, as a script's next step expects the folder there
    stamp = {p.name: p.stat().st_mtime_ns for p in in_place.iterdir()}
    capsys.readouterr()
    for output, said in ((in_place, "nothing written"), (tmp_path / "copy", "a copy of the model")):
        assert main(["vocab", "extend", "--model", str(in_place), "--corpus", str(corpus), "--output", str(output),
                     "--min-count", "1"]) == 0
        assert said in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in in_place.iterdir()} == stamp and (tmp_path / "copy").is_dir()
