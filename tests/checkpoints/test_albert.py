"""ALBERT folders both ways: bertkit's factorized / shared models as transformers' Albert* classes, and HF ALBERT
folders (SentencePiece tokenizer included) read by bertkit; outputs and MLM / SOP logits compared."""
import json

import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.errors import CheckpointError
from bertkit.model import Encoder, EncoderConfig
from bertkit.model.heads import (MaskedLMHead, QuestionAnsweringHead, SentencePairHead, SequenceClassificationHead,
                                 TokenClassificationHead)

transformers = pytest.importorskip("transformers")

PIECES = ["▁the", "▁cat", "▁sat", "▁on", "▁mat", "▁", "s", "a", "t", "c", "h", "e", "o", "n", "m", "▁hello",
          "▁world", "l", "r", "d", "w"]
SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
TEXTS = ["Hello the cats sat", "on the mat, world"]


def albert_config(embedding_size=16, share_layers="all", **changes):
    return EncoderConfig(vocab_size=len(SPECIALS) + len(PIECES), hidden_size=32, num_layers=3, num_heads=4,
                         intermediate_size=64, max_position_embeddings=40, embedding_size=embedding_size,
                         share_layers=share_layers, activation="gelu_tanh", **changes)


def random_heads(config, keys):
    build = {"mlm": MaskedLMHead, "pair": SentencePairHead, "qa": QuestionAnsweringHead,
             "classifier": lambda c: SequenceClassificationHead(c, 3),
             "token_classifier": lambda c: TokenClassificationHead(c, 4)}
    heads = {key: build[key](config).eval() for key in keys}
    for head in heads.values():
        for parameter in head.parameters():   # far from the zero-bias init, so a lost head weight shows
            torch.nn.init.normal_(parameter, std=0.5)
    return heads


def batch():
    ids = torch.tensor([[2, 20, 5, 6, 11, 7, 3, 0, 0], [2, 8, 5, 9, 13, 21, 10, 17, 3]])
    return ids, (ids != 0).long()


def ours(encoder, heads, ids, mask):
    with torch.no_grad():
        out = encoder(ids, mask)
        logits = {"hidden": out.last_hidden_state}
        for key, head in heads.items():
            if key == "mlm":
                logits[key] = head(out.last_hidden_state, encoder.embeddings.token.weight)
            elif key in ("pair", "classifier"):
                logits[key] = head(out.pooled_output)
            elif key == "qa":
                logits[key] = torch.stack(head(out.last_hidden_state), -1)
            else:
                logits[key] = head(out.last_hidden_state)
    return logits


def theirs(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    logits = {"hidden": out.hidden_states[-1]}
    if hasattr(out, "prediction_logits"):
        logits.update(mlm=out.prediction_logits, pair=out.sop_logits)
    elif hasattr(out, "start_logits"):
        logits["qa"] = torch.stack([out.start_logits, out.end_logits], -1)
    elif hasattr(out, "logits"):
        key = {"AlbertForMaskedLM": "mlm", "AlbertForSequenceClassification": "classifier"}.get(
            type(model).__name__, "token_classifier")
        logits[key] = out.logits
    return logits


def assert_same(a, b, mask):
    assert set(a) == set(b)
    real = mask.bool()
    for key in a:
        x, y = a[key], b[key]
        diff = (x - y)[real] if x.dim() >= 2 and x.shape[:2] == real.shape else x - y
        assert diff.abs().max() <= 1e-4, key


@pytest.mark.parametrize("embedding_size,share_layers", [(16, "all"), (16, "none"), (None, "all")])
@pytest.mark.parametrize("head_keys,architecture", [
    ((), "AlbertModel"), (("mlm",), "AlbertForMaskedLM"), (("mlm", "pair"), "AlbertForPreTraining"),
    (("classifier",), "AlbertForSequenceClassification"), (("token_classifier",), "AlbertForTokenClassification"),
    (("qa",), "AlbertForQuestionAnswering")])
def test_bertkit_albert_loads_in_transformers(tmp_path, embedding_size, share_layers, head_keys, architecture):
    torch.manual_seed(0)
    config = albert_config(embedding_size, share_layers)
    encoder, heads = Encoder(config).eval(), random_heads(config, head_keys)
    save_checkpoint(tmp_path / "m", encoder, None, heads,
                    {"task": "ner"} if "token_classifier" in head_keys else None)
    written = json.loads((tmp_path / "m" / "config.json").read_text())
    assert written["model_type"] == "albert" and written["architectures"] == [architecture]
    model, info = getattr(transformers, architecture).from_pretrained(str(tmp_path / "m"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    ids, mask = batch()
    expected = ours(encoder, heads, ids, mask)
    expected.pop("pair", None) if architecture != "AlbertForPreTraining" else None
    assert_same(theirs(model.eval(), ids, mask), expected, mask)
    # and back: bertkit reads its own ALBERT folder into the same model
    again = load_checkpoint(tmp_path / "m")
    assert again.config == config
    assert_same(ours(again.encoder, again.heads, ids, mask), ours(encoder, heads, ids, mask), mask)


@pytest.fixture
def hf_albert_folder(tmp_path):
    def make(groups=1, layers=3):
        torch.manual_seed(1)
        vocab = [(t, 0.0) for t in SPECIALS] + [(p, -float(i)) for i, p in enumerate(PIECES)]
        config = transformers.AlbertConfig(vocab_size=len(vocab), embedding_size=16, hidden_size=32,
                                           num_hidden_layers=layers, num_hidden_groups=groups, num_attention_heads=4,
                                           intermediate_size=64, max_position_embeddings=40)
        model = transformers.AlbertForPreTraining(config).eval()
        folder = tmp_path / f"hf-albert-{groups}"
        model.save_pretrained(folder)
        tokenizer = transformers.AlbertTokenizer(vocab=vocab)
        tokenizer.save_pretrained(folder)
        return folder, model, tokenizer
    return make


@pytest.mark.parametrize("groups", [1, 3])
def test_hf_albert_folder_reads_exactly(hf_albert_folder, groups):
    folder, model, tokenizer = hf_albert_folder(groups)
    loaded = bertkit.load(folder)
    assert loaded.config.share_layers == ("all" if groups == 1 else "none") and loaded.config.embedding_size == 16
    reference = tokenizer(TEXTS, padding=True, return_tensors="pt")
    encoded = loaded.tokenizer.pad_to_tensors(loaded.tokenizer.encode_batch(TEXTS))
    assert torch.equal(encoded["input_ids"], reference["input_ids"])    # SentencePiece ids as AlbertTokenizer's
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    assert_same(ours(loaded.encoder, loaded.heads, ids, mask), theirs(model, ids, mask), mask)


def test_hf_albert_finetunes_and_saves_as_albert(hf_albert_folder, tmp_path):
    folder, _, _ = hf_albert_folder(1)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": label}) + "\n"
                             for t, label in [("the cat sat", "a"), ("hello world", "b")] * 4))
    assert main(["finetune", "--task", "classification", "--model", str(folder), "--train", str(train),
                 "--dev", str(train), "--output", str(tmp_path / "cls"), "--epochs", "1",
                 "--batch-size", "4", "--max-length", "16", "--progress_bar=false"]) == 0
    model, info = transformers.AlbertForSequenceClassification.from_pretrained(str(tmp_path / "cls"),
                                                                              output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tuned = bertkit.load(tmp_path / "cls")
    encoded = tuned.tokenizer.pad_to_tensors(tuned.tokenizer.encode_batch(TEXTS))
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    with torch.no_grad():
        expected = model.eval()(input_ids=ids, attention_mask=mask).logits
    got = ours(tuned.encoder, tuned.heads, ids, mask)["classifier"]
    assert (got - expected).abs().max() <= 1e-4


@pytest.mark.parametrize("change,message", [
    (dict(num_hidden_layers=4, num_hidden_groups=2), "num_hidden_groups 2 with 4 layers"),
    (dict(inner_group_num=2), "inner_group_num 2")])
def test_albert_layouts_bertkit_cannot_compute_are_named(hf_albert_folder, change, message):
    folder, _, _ = hf_albert_folder(1)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(folder)


def test_spiece_model_without_tokenizer_json_says_how_to_convert(hf_albert_folder):
    folder, _, _ = hf_albert_folder(1)
    (folder / "tokenizer.json").unlink()
    (folder / "spiece.model").write_bytes(b"\x0a\x03abc")
    with pytest.raises(CheckpointError, match="spiece.model without tokenizer.json.*save_pretrained"):
        load_checkpoint(folder)


@pytest.mark.parametrize("changes,why", [
    (dict(share_layers="attention"), "only the attention is shared"),
    (dict(share_layers="ffn"), "only the feed-forward is shared"),
    (dict(norm_position="pre"), "pre-LN"),
])
def test_variants_without_an_hf_class_are_refused_by_transformers(tmp_path, changes, why):
    config = albert_config(**changes)
    save_checkpoint(tmp_path / "m", Encoder(config).eval(), None)
    written = json.loads((tmp_path / "m" / "config.json").read_text())
    meta = json.loads((tmp_path / "m" / "bertkit.json").read_text())
    assert written["model_type"] == "bertkit" and written["architectures"] == []
    assert meta["hf_compatible"] is False and why in meta["transformers"]["why_not"]
    with pytest.raises(ValueError, match="bertkit"):    # transformers refuses instead of loading something else
        transformers.AutoModel.from_pretrained(str(tmp_path / "m"))
    assert load_checkpoint(tmp_path / "m").config == config
