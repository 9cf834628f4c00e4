from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.api import load
from bertkit.embed.evaluation import (evaluate_model, rankdata, read_pairs, read_retrieval_files, retrieval_metrics,
                                      spearman, top_k)
from bertkit.errors import InputFileError


def test_retrieval_metrics_on_hand_made_rankings():
    corpus = np.eye(4, dtype=np.float32)
    # query 0 ranks doc 0 first; query 1 ranks doc 2 first and doc 1 second.
    queries = np.array([[1, 0, 0, 0], [0, 0.5, 1, 0]], dtype=np.float32)
    assert top_k(queries, corpus, 2)[:, 0].tolist() == [0, 2] and top_k(queries, corpus, 2)[1, 1] == 1
    metrics = retrieval_metrics(queries, corpus, [{0}, {1}])
    assert metrics.recall_at_1 == pytest.approx(0.5)
    assert metrics.recall_at_10 == pytest.approx(1.0)
    assert metrics.mrr_at_10 == pytest.approx((1 + 0.5) / 2)
    assert metrics.ndcg_at_10 == pytest.approx((1 + 1 / np.log2(3)) / 2)
    two_relevant = retrieval_metrics(queries[1:], corpus, [{1, 2}])
    assert two_relevant.recall_at_1 == pytest.approx(0.5) and two_relevant.ndcg_at_10 == pytest.approx(1.0)


def test_spearman_matches_known_values_with_ties():
    assert rankdata(np.array([10, 20, 20, 5])).tolist() == [2, 3.5, 3.5, 1]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)


def test_retrieval_files_and_errors_name_the_line(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": 1, "text": "a"}\n{"id": "b", "text": "bb"}\n')
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"text": "x", "relevant": [1, "b"]}\n{"text": "y", "relevant": "zz"}\n')
    with pytest.raises(InputFileError, match=r"q.jsonl:2: .*zz"):
        read_retrieval_files(queries, corpus)
    queries.write_text('{"text": "x", "relevant": [1, "b"]}\n{"query": "y", "id": 1}\n')
    with pytest.raises(InputFileError, match=r"q.jsonl:2: missing field 'relevant' .*fields: query, id\)"):
        read_retrieval_files(queries, corpus)          # said "not in the corpus: [None]"
    queries.write_text('{"text": "x", "relevant": [1, "b"]}\n')
    task = read_retrieval_files(queries, corpus)
    assert task.relevant == [{0, 1}] and task.corpus == ["a", "bb"]


def test_evaluate_model_end_to_end(tmp_path, tiny_model_dir):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"text_a": t, "text_b": t}) for t in ["the cat", "a dog", "red sky"]))
    scored = tmp_path / "scored.jsonl"
    scored.write_text("\n".join(json.dumps({"text_a": "the cat", "text_b": b, "score": s})
                                for b, s in [("the cat", 5), ("a cat", 3), ("blue sea river", 0)]))
    results = evaluate_model(load(tiny_model_dir), pairs=pairs)
    assert results["pairs_retrieval"]["recall_at_1"] == pytest.approx(1.0)   # identical texts find each other
    assert -1 <= evaluate_model(load(tiny_model_dir), pairs=scored)["spearman"] <= 1


@pytest.mark.parametrize("bad", ['"high"', "null", "true", "[4]", '"nan"'])
def test_a_pair_score_that_is_not_a_number_names_the_line(tmp_path, bad):
    pairs = tmp_path / "scored.jsonl"
    pairs.write_text('{"text_a": "a", "text_b": "b", "score": 4}\n'
                     '{"text_a": "a", "text_b": "c", "score": "2.5"}\n'
                     f'{{"text_a": "a", "text_b": "d", "score": {bad}}}\n')
    with pytest.raises(InputFileError, match=r"scored.jsonl:3: 'score' must be a finite number"):
        read_pairs(pairs)                               # was a ValueError/TypeError traceback from float()
    pairs.write_text('{"text_a": "a", "text_b": "b", "score": 4}\n{"text_a": "a", "text_b": "c", "score": "2.5"}\n')
    assert read_pairs(pairs)[2] == [4.0, 2.5]


def test_an_empty_text_is_named_by_file_line_and_field(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"text_a": "a", "text_b": "b"}\n{"text_a": "c", "text_b": "  "}\n')
    # the encoder said "text 1 is empty", its index in the list of text_b
    with pytest.raises(InputFileError, match=r"pairs.jsonl:2: 'text_b' is empty or whitespace-only"):
        read_pairs(pairs)
    corpus, queries = tmp_path / "c.jsonl", tmp_path / "q.jsonl"
    corpus.write_text('{"id": 1, "text": "a"}\n{"id": 2, "text": ""}\n')
    queries.write_text('{"text": "x", "relevant": 1}\n')
    with pytest.raises(InputFileError, match=r"c.jsonl:2: 'text' is empty or whitespace-only"):
        read_retrieval_files(queries, corpus)
