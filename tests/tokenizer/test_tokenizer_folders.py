"""Tokenizer folders: chosen by the files present, casing read or inferred and checked, HF round trips."""
from __future__ import annotations

import json
import shutil
import warnings

import pytest
from tokenizers import Tokenizer as RustTokenizer
from tokenizers.models import BPE

from bertkit.errors import CheckpointError
from bertkit.tokenizer import Tokenizer

PAIRS = ["general kenobi", "你好", "[MASK] and [unused3]", "", "Ünïcödé", "b", "c", "d", "e", "f", "g", "h",
         "i", "j", "k", "l", "m", "n"]


def _copy_vocab(source_folder, target_folder, config: dict | None = None, meta: dict | None = None):
    target_folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source_folder / "vocab.txt", target_folder / "vocab.txt")
    if config is not None:
        (target_folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    if meta is not None:
        (target_folder / "bertkit.json").write_text(json.dumps(meta), encoding="utf-8")
    return target_folder


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_save_then_auto_tokenizer_gives_the_same_ids(casing, request, tmp_path, parity_texts):
    transformers = pytest.importorskip("transformers")
    tokenizer = request.getfixturevalue(casing)
    tokenizer.save(tmp_path)
    assert {"vocab.txt", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in tmp_path.iterdir()}
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["do_lower_case"] is tokenizer.lowercase and config["tokenizer_class"] == "BertTokenizer"
    assert config["model_max_length"] == 512 and config["mask_token"] == "[MASK]"

    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    texts = parity_texts + ["[unused3] marks stay whole"]
    ours = tokenizer.encode_batch(texts, max_length=None)
    assert ours.input_ids == hf(texts)["input_ids"]
    pairs = tokenizer.encode_batch(texts, PAIRS + ["x"], max_length=None)
    theirs = hf(texts, PAIRS + ["x"], return_token_type_ids=True)
    assert pairs.input_ids == theirs["input_ids"] and pairs.token_type_ids == theirs["token_type_ids"]


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_save_then_from_folder_gives_the_same_tokenizer(casing, request, tmp_path, parity_texts):
    tokenizer = request.getfixturevalue(casing)
    tokenizer.save(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a saved tokenizer's casing matches its vocab: no warning
        loaded = Tokenizer.from_folder(tmp_path)
    assert loaded.lowercase is tokenizer.lowercase and loaded.vocab_size == tokenizer.vocab_size
    assert loaded.encode_batch(parity_texts).input_ids == tokenizer.encode_batch(parity_texts).input_ids
    (tmp_path / "tokenizer.json").unlink()  # vocab.txt + tokenizer_config.json alone give the same
    assert Tokenizer.from_folder(tmp_path).encode_batch(parity_texts).input_ids == \
        tokenizer.encode_batch(parity_texts).input_ids


def test_hf_folder_loads_with_its_settings(minilm_dir, uncased, parity_texts):
    tokenizer = Tokenizer.from_folder(minilm_dir)
    assert tokenizer.lowercase and tokenizer.model_max_length == 512
    assert tokenizer.encode_batch(parity_texts).input_ids == uncased.encode_batch(parity_texts).input_ids


def test_tokenizer_is_chosen_from_files_not_from_the_folder_name(minilm_dir, tmp_path):
    # Chinese RoBERTa-wwm ships a BERT vocab.txt under a "roberta" name: it is a WordPiece tokenizer.
    folder = _copy_vocab(minilm_dir, tmp_path / "chinese-roberta-wwm-ext")
    tokenizer = Tokenizer.from_folder(folder)
    assert tokenizer.tokenize("北京 hello") == ["北", "京", "hello"]
    only_json = tmp_path / "gpt2-bpe-looking-name"
    only_json.mkdir()
    shutil.copy(minilm_dir / "tokenizer.json", only_json / "tokenizer.json")
    assert Tokenizer.from_folder(only_json).tokenize("北京 hello") == ["北", "京", "hello"]


def test_folder_without_tokenizer_files_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"no tokenizer.json or vocab.txt \(found: config.json\)"):
        Tokenizer.from_folder(tmp_path)
    with pytest.raises(CheckpointError, match="not a folder"):
        Tokenizer.from_folder(tmp_path / "missing")


def test_a_vocab_without_special_tokens_is_named(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\na\nb\n")
    for source in (tmp_path / "vocab.txt", tmp_path):
        with pytest.raises(CheckpointError, match=rf"^{tmp_path / 'vocab.txt'}: the vocab lacks the special token\(s\) "
                                                  r"\[UNK\], \[CLS\], \[SEP\], \[MASK\]"):
            Tokenizer.from_vocab_file(source) if source.is_file() else Tokenizer.from_folder(source)


def test_non_wordpiece_tokenizer_json_is_refused(tmp_path):
    RustTokenizer(BPE()).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="BPE"):
        Tokenizer.from_folder(tmp_path)


def test_casing_is_inferred_from_the_vocab(minilm_dir, cased_folder, tmp_path):
    assert Tokenizer.from_folder(_copy_vocab(minilm_dir, tmp_path / "u")).lowercase is True
    assert Tokenizer.from_folder(_copy_vocab(cased_folder, tmp_path / "c")).lowercase is False
    assert Tokenizer.from_vocab_file(cased_folder / "vocab.txt").lowercase is False


def test_casing_is_read_from_tokenizer_config_or_bertkit_json(cased_folder, tmp_path):
    with pytest.warns(UserWarning, match="casing mismatch"):
        from_config = Tokenizer.from_folder(_copy_vocab(cased_folder, tmp_path / "a", {"do_lower_case": True}))
    assert from_config.lowercase is True and from_config.tokenize("Hello")[0] == "h"  # "Hello" is in the vocab
    with pytest.warns(UserWarning, match="casing mismatch"):
        from_meta = Tokenizer.from_folder(_copy_vocab(cased_folder, tmp_path / "b", meta={"do_lower_case": True}))
    assert from_meta.lowercase is True


def test_cased_setting_over_an_uncased_vocab_warns(minilm_dir, tmp_path):
    folder = _copy_vocab(minilm_dir, tmp_path / "m", {"do_lower_case": False})
    with pytest.warns(UserWarning, match="no uppercase pieces"):
        tokenizer = Tokenizer.from_folder(folder)
    assert tokenizer.lowercase is False and tokenizer.tokenize("Hello") != ["hello"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tokenizer.check_casing(["all lowercase text"]) is None  # harmless for these texts
    with pytest.warns(UserWarning, match="casing mismatch"):
        assert "do_lower_case=true" in tokenizer.check_casing(["Some Capitals"])


def test_tokenizer_json_casing_follows_tokenizer_config(minilm_dir, tmp_path):
    shutil.copy(minilm_dir / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    with pytest.warns(UserWarning, match="casing mismatch"):
        tokenizer = Tokenizer.from_folder(tmp_path)
    assert tokenizer.lowercase is False and tokenizer.tokenize("Hello")[0] != "hello"


def test_bad_json_is_named(minilm_dir, tmp_path):
    folder = _copy_vocab(minilm_dir, tmp_path / "x")
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="tokenizer_config.json: not valid JSON"):
        Tokenizer.from_folder(folder)


def test_a_folder_load_reads_tokenizer_json_once(uncased, tmp_path, monkeypatch):
    """Choosing the kind (BPE? Unigram? WordPiece) and building the tokenizer share one read of tokenizer.json
    (it was read three times: two kind checks and the WordPiece loader), for each kind of folder."""
    import builtins
    import pathlib

    uncased.save(tmp_path / "wordpiece")
    bpe = RustTokenizer(BPE({"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "<mask>": 4, "a": 5}, [], unk_token="<unk>"))
    (tmp_path / "bpe").mkdir()
    bpe.save(str(tmp_path / "bpe" / "tokenizer.json"))
    reads = []
    real_read_text, real_open = pathlib.Path.read_text, builtins.open

    def read_text(self, *args, **kwargs):
        reads.append(self.name)
        return real_read_text(self, *args, **kwargs)

    def open_(file, *args, **kwargs):
        reads.append(pathlib.Path(str(file)).name)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", read_text)
    monkeypatch.setattr(builtins, "open", open_)
    loaded = Tokenizer.from_folder(tmp_path / "wordpiece")
    assert reads.count("tokenizer.json") == 1 and loaded.backend.get_vocab() == uncased.backend.get_vocab()
    reads.clear()
    assert Tokenizer.from_folder(tmp_path / "bpe").backend.get_vocab_size() == 6
    assert reads.count("tokenizer.json") == 1
