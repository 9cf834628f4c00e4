"""encoding.py: truncation lengths against HF's one-token-at-a-time rule, window positions, errors."""
from __future__ import annotations

import itertools

import pytest

from bertkit.tokenizer.encoding import TextTooLongError, kept_lengths, window_starts


def _hf_longest_first(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """HF's (slow) BertTokenizer: drop one token from the longer text, from the second on a tie."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_longest_first_closed_form_equals_hf_rule():
    for len_a, len_b, max_length in itertools.product(range(12), range(12), range(3, 20)):
        assert kept_lengths(len_a, len_b, max_length, "longest_first", 0) == \
            _hf_longest_first(len_a, len_b, max_length - 3), (len_a, len_b, max_length)


def test_only_first_and_only_second_cut_one_text():
    assert kept_lengths(10, 4, 10, "only_first", 0) == (3, 4)
    assert kept_lengths(4, 10, 10, "only_second", 0) == (4, 3)
    assert kept_lengths(10, None, 6, "only_first", 0) == (4, None)
    assert kept_lengths(3, 2, 8, None, 0) == (3, 2)  # fits: nothing to cut
    assert kept_lengths(300, 200, None, None, 0) == (300, 200)  # no limit


def test_impossible_cuts_raise_with_the_text_index():
    with pytest.raises(TextTooLongError, match="text 7 has 15 tokens") as caught:
        kept_lengths(2, 10, 8, "only_first", 7)
    assert (caught.value.index, caught.value.length, caught.value.limit) == (7, 15, 8)
    with pytest.raises(TextTooLongError, match="only_second"):
        kept_lengths(10, 2, 8, "only_second", 0)
    with pytest.raises(TextTooLongError, match="single texts"):
        kept_lengths(10, None, 8, "only_second", 0)


@pytest.mark.parametrize("num_tokens, window, stride, starts", [
    (0, 10, 2, [0]),
    (10, 10, 2, [0]),
    (11, 10, 2, [0, 8]),
    (18, 10, 2, [0, 8]),
    (19, 10, 2, [0, 8, 16]),
    (36, 10, 4, [0, 6, 12, 18, 24, 30]),
    (5, 3, 0, [0, 3]),
])
def test_windows_cover_every_token_once_the_overlap_is_removed(num_tokens, window, stride, starts):
    assert list(window_starts(num_tokens, window, stride)) == starts
    assert starts[-1] + window >= num_tokens
