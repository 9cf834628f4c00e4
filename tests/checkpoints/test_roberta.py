"""Real RoBERTa folders (byte-level BPE, positions from padding_idx + 1, one segment) against transformers."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import bertkit

transformers = pytest.importorskip("transformers")

CORPUS = ["The quick brown fox jumps over the lazy dog.", "Hello world! Héllo wörld, 你好 世界.",
          "RoBERTa reads byte-level BPE pieces", "numbers 12345 and emoji 😀 too"] * 10
TEXTS = ["Hello world! Héllo wörld", " a leading space", "The quick brown fox jumps over the lazy dog " * 4,
         "😀", "RoBERTa"]
PAIRS = ["the lazy dog", "brown fox", "x", "numbers 12345", "byte-level"]


@pytest.fixture(scope="module")
def roberta_folders(tmp_path_factory, make_tiny_roberta):
    """(folder as transformers saves it: tokenizer.json, folder as the hub ships older models: vocab.json +
    merges.txt and no tokenizer.json, the reference tokenizer, the reference model)."""
    root = tmp_path_factory.mktemp("roberta")
    tokenizer, config = make_tiny_roberta(root / "files", CORPUS, layer_norm_eps=1e-5)
    torch.manual_seed(0)
    model = transformers.RobertaModel(config).eval()
    model.save_pretrained(str(root / "saved"))
    tokenizer.save_pretrained(str(root / "saved"))
    shutil.copytree(root / "saved", root / "classic")
    (root / "classic" / "tokenizer.json").unlink()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(root / "files" / name, root / "classic" / name)
    return root / "saved", root / "classic", tokenizer, model


@pytest.mark.parametrize("layout", ["saved", "classic"])
def test_token_ids_and_hidden_states_match_transformers(layout, roberta_folders):
    saved, classic, tokenizer, reference = roberta_folders
    ours = bertkit.load(saved if layout == "saved" else classic)
    assert ours.tokenizer.byte_level and ours.config.position_offset == 2 and ours.config.max_length == 32
    for kwargs in ({}, {"max_length": 12}):
        expected = tokenizer(TEXTS, truncation=bool(kwargs), **kwargs)["input_ids"]
        assert ours.tokenizer.encode_batch(TEXTS, **kwargs).input_ids == expected
        expected = tokenizer(TEXTS, PAIRS, truncation="longest_first", max_length=12)["input_ids"]
        assert ours.tokenizer.encode_batch(TEXTS, PAIRS, max_length=12).input_ids == expected   # <s> A </s></s> B </s>
    offsets = tokenizer(TEXTS[:2], return_offsets_mapping=True)["offset_mapping"]
    assert ours.tokenizer.encode_batch(TEXTS[:2]).offsets == [[tuple(o) for o in row] for row in offsets]

    batch = tokenizer(TEXTS, PAIRS, padding=True, truncation=True, max_length=32, return_tensors="pt")
    ids = ours.tokenizer.pad_to_tensors(ours.tokenizer.encode_batch(TEXTS, PAIRS, max_length=32))
    assert torch.equal(ids["input_ids"], batch["input_ids"])
    with torch.no_grad():
        expected = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        got = ours.encoder(ids["input_ids"], ids["attention_mask"], ids["token_type_ids"])
    real = batch["attention_mask"].bool()
    assert (got.last_hidden_state - expected.last_hidden_state)[real].abs().max() <= 1e-4
    assert (got.pooled_output - expected.pooler_output).abs().max() <= 1e-4


def test_resaved_roberta_stays_roberta_for_transformers(roberta_folders, tmp_path):
    saved, _, tokenizer, reference = roberta_folders
    bertkit.load(saved).save(tmp_path / "again")
    config = json.loads((tmp_path / "again" / "config.json").read_text())
    assert config["model_type"] == "roberta" and config["pad_token_id"] == 1
    again = bertkit.load(tmp_path / "again")
    assert again.config.position_offset == 2 and again.tokenizer.byte_level
    hf_again = transformers.AutoModel.from_pretrained(str(tmp_path / "again")).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "again"))
    assert hf_tokenizer(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        a = hf_again(**batch).last_hidden_state
        b = reference(**batch).last_hidden_state
    assert torch.equal(a, b)
    vectors = again.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 32) and np.isfinite(vectors).all()


def test_the_files_choose_the_tokenizer_not_the_name(tiny_model_dir, roberta_folders, tmp_path):
    """Chinese RoBERTa-wwm folders are BERT folders with a vocab.txt: named roberta, read as WordPiece."""
    wwm = shutil.copytree(tiny_model_dir, tmp_path / "chinese-roberta-wwm-ext")
    model = bertkit.load(wwm)
    assert not model.tokenizer.byte_level and model.config.position_offset == 0
    named_bert = shutil.copytree(roberta_folders[0], tmp_path / "bert-base-uncased")
    assert bertkit.load(named_bert).tokenizer.byte_level
