"""XLNet's SentencePiece tokenizer: spiece.model read without the sentencepiece package, framing at the end,
left padding, and a malformed model file named in one line."""
import pytest
import torch

from bertkit.errors import CheckpointError
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.tokenizer.sentencepiece_model import parse_sentencepiece_model
from bertkit.tokenizer.xlnet import XLNetTokenizer

TEXTS = ["The Cat sat on the mat", "Héllo wörld, ``news'' today", "", "sport  team   win!"]


@pytest.fixture
def spiece(tmp_path, xlnet_vocab, write_spiece):
    path = tmp_path / "spiece.model"
    write_spiece(xlnet_vocab, path)
    return path


@pytest.mark.parametrize("lowercase", [False, True])
def test_ids_match_transformers(spiece, xlnet_vocab, lowercase):
    from transformers import XLNetTokenizer as Reference

    ours = XLNetTokenizer.from_sentencepiece(spiece, lowercase=lowercase)
    reference = Reference(vocab=xlnet_vocab, do_lower_case=lowercase)
    assert ours.encode_batch(TEXTS).input_ids == reference(TEXTS)["input_ids"]
    assert ours.encode_batch(TEXTS[:2], TEXTS[2:]).token_type_ids == reference(
        TEXTS[:2], TEXTS[2:], return_token_type_ids=True)["token_type_ids"]
    cut = ours.encode_batch(TEXTS, max_length=6)
    assert cut.input_ids == reference(TEXTS, max_length=6, truncation=True)["input_ids"]
    assert cut.truncated == [True, True, False, False]        # "sport team win!" is 4 pieces + 2


def test_windows_and_left_padding(spiece):
    tokenizer = XLNetTokenizer.from_sentencepiece(spiece)
    windows = tokenizer.encode_windows(["the cat sat on the mat the dog sat"], max_length=6, stride=2)
    pieces = tokenizer.encode_batch(["the cat sat on the mat the dog sat"], max_length=None).input_ids[0][:-2]
    assert len(windows.text_index) > 1
    for row, types in zip(windows.encoding.input_ids, windows.encoding.token_type_ids):
        assert row[-2:] == [tokenizer.sep_id, tokenizer.cls_id] and len(row) <= 6 and types[-1] == 2
    assert [t for row in windows.encoding.input_ids for t in row[:-2]][:4] == pieces[:4]
    padded = tokenizer.pad_to_tensors(tokenizer.encode_batch(["the cat sat", "dog"]))
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]    # ▁the ▁cat ▁sat / ▁dog
    assert (padded["input_ids"][1][padded["attention_mask"][1] == 0] == tokenizer.pad_id).all()


def test_pad_to_tensors_left():
    out = pad_to_tensors([[1, 2, 3], [4]], pad_id=0, token_type_ids=[[0, 0, 2], [2]], side="left")
    assert out["input_ids"].tolist() == [[1, 2, 3], [0, 0, 4]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert out["token_type_ids"].tolist() == [[0, 0, 2], [0, 0, 2]]
    assert torch.equal(pad_to_tensors([[1, 2, 3], [4]], 0)["input_ids"], torch.tensor([[1, 2, 3], [4, 0, 0]]))


def test_malformed_model_files_fail_with_one_line(spiece):
    data = spiece.read_bytes()
    assert len(parse_sentencepiece_model(data, "x").pieces) > 50
    for end in range(1, len(data), 7):                     # every cut is either a shorter valid file or named
        try:
            parse_sentencepiece_model(data[:end], "spiece.model")
        except CheckpointError as err:
            assert str(err).startswith("spiece.model: ") and "\n" not in str(err)
    with pytest.raises(CheckpointError, match="holds no pieces"):
        parse_sentencepiece_model(b"", "spiece.model")
    from transformers.utils import sentencepiece_model_pb2_new as pb
    bpe = pb.ModelProto()
    bpe.ParseFromString(data)
    bpe.trainer_spec.model_type = 2
    with pytest.raises(CheckpointError, match="a SentencePiece bpe model"):
        parse_sentencepiece_model(bpe.SerializeToString(), "spiece.model")
