"""The rerank job's pieces against hand-computed references: candidates, both losses, reading triples."""
from __future__ import annotations

import math

import pytest
import torch

from bertkit.errors import InputFileError
from bertkit.finetune.rerank import Triple, candidates, ranking_loss, read_triples


def test_candidates_put_the_positive_first_then_given_then_in_batch():
    triples = [Triple("q0", "p0", ["n0a", "n0b"], 1), Triple("q1", "p1", [], 2), Triple("q2", "p2", ["n2"], 3)]
    groups = candidates(triples, [0, 1, 2], given=1, in_batch=1)
    assert groups == [["p0", "n0a", "p1"], ["p1", "p2"], ["p2", "n2", "p0"]]
    assert candidates(triples, [0, 1, 2], given=2, in_batch=5)[0] == ["p0", "n0a", "n0b", "p1", "p2"]


def test_losses_match_hand_computation():
    scores = torch.tensor([[2.0, 1.0, -1.0], [0.5, 1.5, float("-inf")]])   # second query has one candidate less
    listwise = ranking_loss(scores, "listwise")
    by_hand = (-(2.0 - math.log(math.exp(2) + math.exp(1) + math.exp(-1)))
               - (0.5 - math.log(math.exp(0.5) + math.exp(1.5)))) / 2
    assert listwise.item() == pytest.approx(by_hand, rel=1e-6)
    pairwise = ranking_loss(scores, "pairwise")
    softplus = lambda x: math.log1p(math.exp(x))  # noqa: E731
    assert pairwise.item() == pytest.approx((softplus(-1) + softplus(-3) + softplus(1)) / 3, rel=1e-6)


def test_read_triples_accepts_text_or_list_and_names_bad_lines(tmp_path):
    good = tmp_path / "t.jsonl"
    good.write_text('{"query": "q", "positive": "p", "negative": "n"}\n\n'
                    '{"query": "q2", "positive": "p2", "negatives": ["a", "b"]}\n'
                    '{"query": "q3", "positive": "p3"}\n', encoding="utf-8")
    assert [t.negatives for t in read_triples(good)] == [["n"], ["a", "b"], []]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "positive": "p", "negative": "n"}\n{"query": "q", "positive": "p", '
                   '"negative": [1]}\n', encoding="utf-8")
    with pytest.raises(InputFileError, match="bad.jsonl.*2.*negative"):
        read_triples(bad)
