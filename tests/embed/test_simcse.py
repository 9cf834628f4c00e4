from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.job_config import job_config
from bertkit.embed.simcse import SimCSEConfig, contrastive_loss, read_training_file, run_simcse
from bertkit.errors import BertkitError, InputFileError


def test_contrastive_loss_is_cross_entropy_over_in_batch_candidates():
    anchors = torch.randn(4, 8)
    candidates = torch.randn(6, 8)
    sims = torch.nn.functional.normalize(anchors, dim=-1) @ torch.nn.functional.normalize(candidates, dim=-1).T
    expected = -torch.log_softmax(sims / 0.05, dim=1).diagonal().mean()
    assert contrastive_loss(anchors, candidates, 0.05).item() == pytest.approx(expected.item(), rel=1e-5)
    assert contrastive_loss(candidates[:4], candidates[:4] * 3, 0.05).item() < 0.5   # the twin wins


def test_read_training_file_picks_the_mode_and_names_bad_lines(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("one\n\ntwo\nthree\n", encoding="utf-8")
    data = read_training_file(txt)
    assert data.anchors == ["one", "two", "three"] and data.positives is None
    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"text_a": "x", "text_b": "y", "negative": "z"}\n{"text_a": "u", "text_b": "v"}\n')
    with pytest.raises(InputFileError, match=r"p.jsonl:2: some rows have a 'negative'"):
        read_training_file(pairs)
    pairs.write_text('{"text_a": "x", "text_b": "y"}\n{"text_a": "u"}\n')
    with pytest.raises(InputFileError, match=r"p.jsonl:2: missing string field 'text_b'"):
        read_training_file(pairs)


def test_unsupervised_simcse_trains_and_saves_a_loadable_model(tmp_path, tiny_model_dir, make_sentences):
    import bertkit

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(make_sentences(64)) + "\n", encoding="utf-8")
    config = job_config(SimCSEConfig, model=str(tiny_model_dir), train=str(corpus), output=str(tmp_path / "out"),
                          batch_size=16, max_steps=4, lr=1e-4, progress_bar=False, device="cpu")
    result = run_simcse(config)
    assert result.steps == 4 and all(np.isfinite(result.losses))
    model = bertkit.load(tmp_path / "out")
    assert model.meta["simcse"]["mode"] == "unsupervised" and model.encode_defaults["pooling"] == "mean"
    assert model.encode(["the cat sat"]).shape == (1, 32)


def test_pairs_with_hard_negatives_lower_the_loss(tmp_path, tiny_model_dir, make_sentences, words):
    rows = []
    for i, text in enumerate(make_sentences(32, seed=1)):
        words = text.split()
        rows.append({"text_a": text, "text_b": " ".join(reversed(words)),
                     "negative": " ".join(words[(words.index(w) + 1) % len(words)] for w in words)})
    train = tmp_path / "pairs.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps({"text_a": r["text_a"], "text_b": r["text_b"]}) for r in rows[:8]))
    config = job_config(SimCSEConfig, model=str(tiny_model_dir), train=str(train), output=str(tmp_path / "out"),
                          batch_size=8, epochs=3, lr=1e-3, progress_bar=False, device="cpu", dev=str(dev))
    result = run_simcse(config)
    assert np.mean(result.losses[-3:]) < np.mean(result.losses[:3])
    assert "recall_at_1" in result.last_eval
    with pytest.raises(BertkitError, match="lower --batch-size"):
        run_simcse(job_config(SimCSEConfig, model=str(tiny_model_dir), train=str(train), output=str(tmp_path / "o2"),
                                batch_size=100, device="cpu"))


def test_dev_retrieval_counts_a_shared_text_b_as_evaluate_embeddings_does(tmp_path, tiny_model_dir, make_sentences):
    texts = make_sentences(3, seed=7)
    rows = [{"text_a": t, "text_b": t} for t in texts for _ in range(2)]   # each text_b shared by two pairs
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    train = tmp_path / "corpus.txt"
    train.write_text("\n".join(make_sentences(16)) + "\n", encoding="utf-8")
    config = job_config(SimCSEConfig, model=str(tiny_model_dir), train=str(train), output=str(tmp_path / "out"),
                        batch_size=8, max_steps=1, lr=1e-9, progress_bar=False, device="cpu", dev=str(dev))
    result = run_simcse(config)
    # the copies of a text_b were separate documents that tie: one of each pair "missed" (recall 0.5, not 1.0)
    assert result.last_eval["recall_at_1"] == pytest.approx(1.0)


@pytest.mark.parametrize("row, message", [({"text_a": "x", "text_b": ""}, "'text_b' is empty or whitespace-only"),
                                          ({"text_a": "x", "text_b": "y", "negative": "  "},
                                           "'negative' is empty or whitespace-only")])
def test_an_empty_side_of_a_training_pair_is_refused_naming_its_line(tmp_path, row, message):
    rows = [{"text_a": f"a {i}", "text_b": f"b {i}", **({"negative": "n"} if "negative" in row else {})}
            for i in range(3)] + [row]
    train = tmp_path / "pairs.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    # it trained on the empty text's [CLS] [SEP] vector as a positive or negative
    with pytest.raises(InputFileError, match=f"pairs.jsonl:4: {message}"):
        read_training_file(train)
