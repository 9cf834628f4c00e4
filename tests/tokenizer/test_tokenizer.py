"""Tokenizer: ids equal HF's (slow, Python) BertTokenizer; offsets, truncation, errors, windows, unk rate."""
from __future__ import annotations

import itertools
import unicodedata

import pytest

from bertkit.errors import BertkitError
from bertkit.tokenizer import TextTooLongError, Tokenizer

WORDS = "one two three four five six seven eight nine ten eleven twelve".split()
PAIR_TEXTS = [" ".join(WORDS[:n]) for n in (0, 1, 2, 3, 5, 8, 12)] + ["我爱北京天安门", "Café [MASK] 😀"]


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_ids_equal_hf_slow_bert_tokenizer(casing, request, parity_texts):
    tokenizer, hf = request.getfixturevalue(casing), request.getfixturevalue(f"hf_{casing}")
    batch = tokenizer.encode_batch(parity_texts, max_length=None)
    for text, ids, type_ids in zip(parity_texts, batch.input_ids, batch.token_type_ids):
        assert ids == hf(text)["input_ids"], text
        assert type_ids == [0] * len(ids)
        assert tokenizer.tokenize(text) == hf.tokenize(text), text


def test_casing_is_what_the_vocab_needs(uncased, cased):
    assert uncased.tokenize("Café ÉCOLE") == ["cafe", "ecole"]
    assert "Z" in "".join(cased.tokenize("Zürich")) and "ü" in "".join(cased.tokenize("Zürich"))


def test_chinese_characters_are_single_tokens(uncased):
    assert uncased.tokenize("北京天安") == ["北", "京", "天", "安"]
    assert uncased.tokenize("NLP中国") == ["nl", "##p", "中", "国"]


def test_special_and_unused_tokens_are_never_split(uncased):
    ids = uncased.encode_batch(["a [MASK] b[SEP][unused7] c"]).input_ids[0]
    assert ids[2] == uncased.mask_id and uncased.mask_id == uncased.token_to_id("[MASK]")
    assert ids[4] == uncased.sep_id
    assert ids[5] == uncased.token_to_id("[unused7]")
    assert uncased.tokenize("[unused0]x") == ["[unused0]", "x"]
    assert uncased.tokenize("[mask]") == ["[", "mask", "]"]  # only the exact spelling is special, as in HF


def test_words_over_100_characters_become_one_unk(uncased):
    assert uncased.tokenize("a" * 100) != ["[UNK]"]
    assert uncased.tokenize("a" * 101) == ["[UNK]"]
    assert uncased.tokenize("ok " + "b" * 300 + " ok") == ["ok", "[UNK]", "ok"]


def test_pairs_and_truncation_strategies_equal_hf(uncased, hf_uncased):
    checked = 0
    for first, second in itertools.product(PAIR_TEXTS, PAIR_TEXTS):
        for truncation, max_length in itertools.product(["longest_first", "only_first", "only_second"],
                                                        [3, 5, 8, 9, 12, 20]):
            try:
                ours = uncased.encode_batch([first], [second], max_length=max_length, truncation=truncation)
            except TextTooLongError:
                continue  # where the strategy cannot fit the pair; HF returns an over-long row there
            theirs = hf_uncased(first, second, truncation=truncation, max_length=max_length,
                                return_token_type_ids=True)
            assert ours.input_ids[0] == theirs["input_ids"], (first, second, truncation, max_length)
            assert ours.token_type_ids[0] == theirs["token_type_ids"]
            assert len(ours.input_ids[0]) <= max_length
            checked += 1
    assert checked > 500


def test_single_text_truncation_equals_hf_and_is_reported(uncased, hf_uncased):
    texts = [" ".join(WORDS), "one two", "北京天安"]
    batch = uncased.encode_batch(texts, max_length=6)
    assert batch.input_ids == [hf_uncased(t, truncation=True, max_length=6)["input_ids"] for t in texts]
    assert batch.truncated == [True, False, False] and batch.num_truncated == 1
    assert batch.lengths == [6, 4, 6]


def test_pair_truncation_flags(uncased):
    batch = uncased.encode_batch(["one two three", "one"], ["four five six", "two"], max_length=6,
                                 truncation="only_second")
    assert batch.truncated == [True, False]
    assert batch.token_type_ids[0] == [0, 0, 0, 0, 0, 1] and batch.input_ids[0][-1] == uncased.sep_id


def test_too_long_without_truncation_raises_naming_index_length_and_limit(uncased):
    with pytest.raises(TextTooLongError) as caught:
        uncased.encode_batch(["short", " ".join(WORDS)], max_length=8, truncation=None)
    err = caught.value
    assert isinstance(err, BertkitError)
    assert (err.index, err.length, err.limit) == (1, 14, 8)
    assert "text 1" in str(err) and "14 tokens" in str(err) and "8" in str(err)
    assert "truncation" in str(err) and "sliding window" in str(err)
    assert uncased.encode_batch([" ".join(WORDS)], max_length=None, truncation=None).lengths == [14]


def test_truncation_that_cannot_fit_raises(uncased):
    with pytest.raises(TextTooLongError, match="only_first"):
        uncased.encode_batch(["one"], [" ".join(WORDS)], max_length=8, truncation="only_first")
    with pytest.raises(TextTooLongError, match="only_second"):
        uncased.encode_batch([" ".join(WORDS)], max_length=8, truncation="only_second")


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_offsets_map_back_to_the_original_text(casing, request, parity_texts):
    tokenizer = request.getfixturevalue(casing)
    texts = parity_texts + ["  Ünïcödé   spacing\tand [MASK] marks!"]
    batch = tokenizer.encode_batch(texts, max_length=None)
    for text, ids, offsets in zip(texts, batch.input_ids, batch.offsets):
        assert len(offsets) == len(ids)
        assert offsets[0] == offsets[-1] == (0, 0)
        for token_id, (start, end) in zip(ids[1:-1], offsets[1:-1]):
            token = tokenizer.id_to_token(token_id)
            if token == "[UNK]":
                assert text[start:end].strip() and not text[start:end].isspace()
                continue
            surface, piece = text[start:end], token.removeprefix("##")
            if casing == "uncased" and token not in ("[MASK]", "[CLS]", "[SEP]", "[PAD]"):
                surface = _strip_accents(surface.lower())
            if len(surface) > len(piece):  # a character decomposed into pieces (Hangul jamo) maps to all of it
                assert len(text[start:end]) == 1 and piece in surface, (text, token, start, end)
            else:
                assert surface == piece, (text, token, start, end)


def test_pair_offsets_point_into_each_text(uncased):
    batch = uncased.encode_batch(["hello there"], ["general kenobi"])
    spans = [(t, o) for t, o in zip(batch.token_type_ids[0], batch.offsets[0]) if o != (0, 0)]
    assert [("hello there" if t == 0 else "general kenobi")[s:e] for t, (s, e) in spans] == \
        ["hello", "there", "general", "ken", "ob", "i"]


def _strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def test_unk_rate_counts_text_tokens_only(uncased):
    batch = uncased.encode_batch(["hello 😀 world ☃ [MASK]", "ok"])
    assert uncased.tokenize("hello 😀 world ☃") == ["hello", "[UNK]", "world", "[UNK]"]
    assert uncased.unk_rate(batch) == pytest.approx(2 / 5)  # hello [UNK] world [UNK] ok
    assert uncased.unk_rate(uncased.encode_batch([""])) == 0.0
    assert uncased.unk_rate(uncased.encode_batch(["罕见字𠀀𪚥"])) > 0


def test_sliding_windows_cover_the_text_with_overlap(uncased):
    text = " ".join(WORDS * 3)  # 36 tokens
    tokens = uncased.encode_batch([text], max_length=None).input_ids[0][1:-1]
    windows = uncased.encode_windows(text, max_length=12, stride=4)
    rows = windows.encoding.input_ids
    assert windows.text_index == [0] * len(rows) and len(rows) == 6  # starts 0, 6, ..., 30: step 10 - 4
    assert all(len(r) <= 12 and r[0] == uncased.cls_id and r[-1] == uncased.sep_id for r in rows)
    rebuilt = rows[0][1:-1] + [t for r in rows[1:] for t in r[1 + 4:-1]]  # drop each window's overlap
    assert rebuilt == tokens
    for row, offsets in zip(rows, windows.encoding.offsets):
        assert [uncased.id_to_token(i) for i in row[1:-1]] == [text[s:e] for s, e in offsets[1:-1]]


def test_sliding_windows_for_many_texts(uncased):
    windows = uncased.encode_windows(["short", "", " ".join(WORDS * 2)], max_length=10, stride=2)
    assert windows.text_index == [0, 1, 2, 2, 2, 2]
    assert windows.encoding.input_ids[1] == [uncased.cls_id, uncased.sep_id]
    with pytest.raises(ValueError, match="stride"):
        uncased.encode_windows("x", max_length=10, stride=8)


def test_bad_inputs_are_named(uncased):
    with pytest.raises(TypeError, match="list of texts"):
        uncased.encode_batch("one string")
    with pytest.raises(BertkitError, match="text 1 is NoneType"):
        uncased.encode_batch(["fine", None])
    with pytest.raises(ValueError, match="truncation"):
        uncased.encode_batch(["x"], truncation="head")
    with pytest.raises(ValueError, match="pair"):
        uncased.encode_batch(["x", "y"], pairs=["z"])
    assert uncased.encode_batch([]).input_ids == []


def test_ids_tokens_and_decode(uncased):
    assert (uncased.pad_id, uncased.unk_id, uncased.cls_id, uncased.sep_id, uncased.mask_id) == (0, 100, 101, 102, 103)
    assert uncased.special_ids == {0, 100, 101, 102, 103}
    assert uncased.vocab_size == 30522 and uncased.lowercase
    assert uncased.id_to_token(uncased.token_to_id("hello")) == "hello"
    assert uncased.token_to_id("no-such-token") is None
    ids = uncased.encode_batch(["Hello, wonderful world!"]).input_ids[0]
    assert uncased.decode(ids) == "hello, wonderful world!"
    assert uncased.decode(ids, skip_special_tokens=False).startswith("[CLS] hello")


def test_pad_to_tensors_method_uses_pad_id(uncased):
    batch = uncased.encode_batch(["a b c", "d"], ["e", "f g"])
    tensors = uncased.pad_to_tensors(batch)
    assert tensors["input_ids"].shape == (2, 7)
    assert tensors["input_ids"][1].tolist() == batch.input_ids[1] + [uncased.pad_id]
    assert tensors["token_type_ids"][1].tolist() == batch.token_type_ids[1] + [0]
    assert uncased.pad_to_tensors(batch.input_ids)["token_type_ids"].sum() == 0


def test_hub_tokenizer_json_padding_is_switched_off(minilm_dir):
    # MiniLM's tokenizer.json pads to 128 and truncates at 128: bertkit pads per batch and truncates explicitly.
    tokenizer = Tokenizer.from_tokenizer_json(minilm_dir / "tokenizer.json")
    assert tokenizer.encode_batch(["x"]).lengths == [3]
    assert tokenizer.encode_batch([" ".join(["word"] * 200)]).lengths == [202]


def test_long_texts_cut_early_give_the_same_rows_as_cutting_after(uncased, hf_uncased):
    texts = [" ".join(WORDS * 40),                   # cut at a space long before its end
             "北京天安" * 200,                        # no space: split in full
             " ".join(["x" * 30] * 40),              # a head with too few tokens: split again in full
             "short text", " ".join(WORDS * 40) + " [MASK]"]
    cut = uncased.encode_batch(texts, max_length=20)
    full = uncased.encode_batch(texts, max_length=None)
    assert cut.truncated == [True, True, True, False, True]
    for row, offsets, full_row, full_offsets in zip(cut.input_ids, cut.offsets, full.input_ids, full.offsets):
        kept = min(len(full_row) - 2, 18)
        assert row == full_row[:kept + 1] + [uncased.sep_id] and offsets == full_offsets[:kept + 1] + [(0, 0)]
    assert cut.input_ids == [hf_uncased(t, truncation=True, max_length=20)["input_ids"] for t in texts]


def test_tidy_spacing_reattaches_wordpiece_punctuation():
    from bertkit.tokenizer.spacing import tidy_spacing
    assert tidy_spacing("he said, “ why? didn ’ t you know my father ’ s house? ” i ' m here ( now ).") == \
        "he said, “why? didn’t you know my father’s house?” i'm here (now)."
    assert tidy_spacing("the kings ’ house and ‘ buy it. ’ then") == "the kings’ house and ‘buy it.’ then"
    assert tidy_spacing('a " quoted " word') == 'a " quoted " word'          # straight quotes: left alone
