"""XLNet folders against transformers, both ways: random small models with every parameter perturbed, left-padded
batches with segments, the LM head with perm_mask and target_mapping, and memory across two segments."""
import json
import shutil

import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.errors import BertkitError, CheckpointError
from bertkit.finetune.model import FinetuneModel
from bertkit.model.permutation import permutation_targets

TOL = 1e-4
TEXTS = ["the cat sat on the mat", "hello world", "a good movie, a great film!", "news"]
PAIRS = ["the dog", "was awful", "price", "sport team win"]


@pytest.fixture
def pieces(xlnet_vocab):
    return xlnet_vocab


def hf_batch(pieces, pairs=True):
    """What transformers feeds XLNet: left padding, segments 0 / 1, 2 for <cls>."""
    from transformers import XLNetTokenizer
    return XLNetTokenizer(vocab=pieces)(TEXTS, PAIRS if pairs else None, padding=True, return_tensors="pt",
                                        return_token_type_ids=True)


def run_hf(model, inputs, **extra):
    with torch.no_grad():
        return model(**inputs, **extra)


def test_tokenizer_matches_transformers_from_spiece_and_tokenizer_json(tmp_path, make_xlnet_folder, pieces):
    make_xlnet_folder("XLNetModel", tmp_path / "spiece", tokenizer="spiece")
    make_xlnet_folder("XLNetModel", tmp_path / "json", tokenizer="json")
    expected = hf_batch(pieces)
    for folder in ("spiece", "json"):
        tokenizer = bertkit.load(tmp_path / folder).tokenizer
        got = tokenizer.pad_to_tensors(tokenizer.encode_batch(TEXTS, PAIRS))
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert torch.equal(got[key], expected[key]), (folder, key)
    # the folder bertkit writes is read by transformers' own XLNetTokenizer with the same ids
    from transformers import AutoTokenizer
    bertkit.load(tmp_path / "spiece").tokenizer.save(tmp_path / "saved")
    assert (tmp_path / "saved" / "spiece.model").read_bytes() == (tmp_path / "spiece" / "spiece.model").read_bytes()
    again = AutoTokenizer.from_pretrained(str(tmp_path / "saved"))
    assert again(TEXTS, PAIRS)["input_ids"] == bertkit.load(tmp_path / "spiece").tokenizer.encode_batch(
        TEXTS, PAIRS).input_ids


def test_encoder_matches_transformers_with_segments_left_padding_and_mems(tmp_path, make_xlnet_folder, pieces):
    reference = make_xlnet_folder("XLNetModel", tmp_path / "hf")
    inputs = hf_batch(pieces)
    expected = run_hf(reference, inputs, use_mems=True, output_hidden_states=True)
    checkpoint = load_checkpoint(tmp_path / "hf")
    ids, mask, types = inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
    with torch.no_grad():
        ours = checkpoint.encoder(ids, mask, types, output_hidden_states=True, use_mems=True)
    real = mask.bool()
    for got, want in zip(ours.hidden_states, expected.hidden_states):
        assert (got - want)[real].abs().max() <= TOL
    for got, want in zip(ours.mems, expected.mems):                       # HF keeps mems as (M, B, C)
        assert (got - want.transpose(0, 1))[real].abs().max() <= TOL
    # the next segment attends the memory of the first
    follow = torch.randint(9, len(pieces), (len(TEXTS), 5))
    with torch.no_grad():
        want = reference(input_ids=follow, mems=expected.mems, use_mems=True).last_hidden_state
        got = checkpoint.encoder(follow, mems=ours.mems).last_hidden_state
    assert (got - want).abs().max() <= TOL
    # the same rows padded on the right: the real tokens' outputs do not move
    order = (~real).long().argsort(dim=1, stable=True)                    # real tokens first, then padding
    with torch.no_grad():
        right = checkpoint.encoder(ids.gather(1, order), real.gather(1, order).long(), types.gather(1, order))
    for row in range(len(TEXTS)):
        assert (right.last_hidden_state[row][real.gather(1, order)[row]] - ours.last_hidden_state[row][real[row]]
                ).abs().max() <= 1e-5


def test_lm_head_with_perm_mask_and_target_mapping_both_ways(tmp_path, make_xlnet_folder, pieces):
    from transformers import XLNetLMHeadModel

    reference = make_xlnet_folder("XLNetLMHeadModel", tmp_path / "hf")
    inputs = hf_batch(pieces)
    predictable = inputs["attention_mask"].bool() & (inputs["input_ids"] > 8)
    targets = permutation_targets(predictable, k=3, rng=torch.Generator().manual_seed(0))
    expected = run_hf(reference, inputs, perm_mask=targets.perm_mask, target_mapping=targets.target_mapping).logits
    checkpoint = load_checkpoint(tmp_path / "hf")
    with torch.no_grad():
        out = checkpoint.encoder(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"],
                                 perm_mask=targets.perm_mask, target_mapping=targets.target_mapping)
        logits = checkpoint.heads["lm"](out.query_hidden_state, checkpoint.encoder.embeddings.token.weight)
    used = targets.target_positions >= 0
    assert (logits - expected)[used].abs().max() <= TOL
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 0
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == ["XLNetLMHeadModel"]
    again = XLNetLMHeadModel.from_pretrained(str(tmp_path / "ours")).eval()
    result = run_hf(again, inputs, perm_mask=targets.perm_mask, target_mapping=targets.target_mapping).logits
    assert (result - expected).abs().max() <= TOL


@pytest.mark.parametrize("name", ["XLNetForSequenceClassification", "XLNetForTokenClassification", "XLNetModel"])
def test_classification_folders_both_ways(name, tmp_path, make_xlnet_folder, pieces):
    import transformers

    reference = make_xlnet_folder(name, tmp_path / "hf", summary_last_dropout=0.2)
    inputs = hf_batch(pieces)
    expected = run_hf(reference, inputs)
    checkpoint = load_checkpoint(tmp_path / "hf")
    ids, mask, types = inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
    with torch.no_grad():
        if name == "XLNetForSequenceClassification":
            got = FinetuneModel(checkpoint.encoder, checkpoint.heads["classifier"], "classification")(ids, mask, types)
            assert (got - expected.logits).abs().max() <= TOL
            # right padding: bertkit reads the last real token, so the logits stay
            order = (1 - mask).argsort(dim=1, stable=True)
            right = FinetuneModel(checkpoint.encoder, checkpoint.heads["classifier"], "classification")(
                ids.gather(1, order), mask.gather(1, order), types.gather(1, order))
            assert (right - expected.logits).abs().max() <= TOL
        elif name == "XLNetForTokenClassification":
            got = checkpoint.heads["token_classifier"](checkpoint.encoder(ids, mask, types).last_hidden_state)
            assert (got - expected.logits)[mask.bool()].abs().max() <= TOL
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 0
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [name]
    result = run_hf(getattr(transformers, name).from_pretrained(str(tmp_path / "ours")).eval(), inputs)
    field = "last_hidden_state" if name == "XLNetModel" else "logits"
    assert (getattr(result, field) - getattr(expected, field)).abs().max() <= TOL


def test_encode_matches_transformers_mean_of_token_vectors(tmp_path, make_xlnet_folder, pieces):
    from transformers import XLNetTokenizer

    reference = make_xlnet_folder("XLNetModel", tmp_path / "hf")
    inputs = XLNetTokenizer(vocab=pieces)(TEXTS, padding=True, return_tensors="pt")   # transformers' default
    hidden = run_hf(reference, inputs).last_hidden_state
    weights = inputs["attention_mask"].unsqueeze(-1).float()
    expected = ((hidden * weights).sum(1) / weights.sum(1)).numpy()
    vectors = bertkit.load(tmp_path / "hf").encode(TEXTS, pooling="mean", batch_size=3)
    assert abs(vectors - expected).max() <= TOL


def test_bad_xlnet_folders_are_named_in_one_line(tmp_path, make_xlnet_folder, capsys):
    make_xlnet_folder("XLNetModel", tmp_path / "hf", tokenizer="json")
    folder = tmp_path / "hf"
    (folder / "tokenizer.json").unlink()                              # tokenizer_config.json stays
    with pytest.raises(CheckpointError, match="has tokenizer_config.json but no spiece.model"):
        load_checkpoint(folder)
    (tmp_path / "texts.txt").write_text("the cat\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["encode", "--model", str(folder), "--input", str(tmp_path / "texts.txt"),
                 "--output", str(tmp_path / "v.npy")]) == 2
    message = capsys.readouterr().err.strip()
    assert "no spiece.model" in message and len(message.splitlines()) == 1

    (folder / "spiece.model").write_bytes(b"\x0a\xff\xff\xff\xff\x0f")   # a piece claiming more bytes than exist
    with pytest.raises(CheckpointError, match="not a valid SentencePiece model"):
        load_checkpoint(folder)

    shutil.rmtree(folder)
    make_xlnet_folder("XLNetModel", folder, tokenizer=None)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attn_type": "uni"}))
    with pytest.raises(CheckpointError, match="attn_type='uni' is not supported"):
        load_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "xlnet-large"}))
    with pytest.raises(CheckpointError, match="model_type 'xlnet-large' is not a BERT-family encoder"):
        load_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match="no spiece.model or tokenizer.json"):
        assert load_checkpoint(folder).tokenizer is None              # a bare model folder still loads


def test_cls_pooling_is_refused_for_xlnet(tmp_path, make_xlnet_folder):
    make_xlnet_folder("XLNetModel", tmp_path / "x")
    model = bertkit.load(tmp_path / "x")
    with pytest.raises(BertkitError, match="XLNet's <cls> is its last token"):
        model.encode(["the cat"], pooling="cls")
    last = model.encode(["the cat", "hello world news"], pooling="last-token")       # <cls>, wherever padding is
    with torch.no_grad():
        hidden = model.encoder(torch.tensor([model.tokenizer.encode_batch(["the cat"]).input_ids[0]])).last_hidden_state
    assert abs(last[0] - hidden[0, -1].numpy()).max() <= 1e-5


@pytest.mark.parametrize("command", [["export-onnx", "--output", "{tmp}/m.onnx"],
                                     ["prune-heads", "--output", "{tmp}/p", "--dev", "{tmp}/d.jsonl", "--fraction", "0.3"]])
def test_bert_only_commands_refuse_xlnet_in_one_line(command, tmp_path, make_xlnet_folder, capsys):
    make_xlnet_folder("XLNetModel", tmp_path / "x")
    (tmp_path / "d.jsonl").write_text('{"text": "the cat", "label": "a"}\n', encoding="utf-8")
    capsys.readouterr()
    args = [command[0], "--model", str(tmp_path / "x"), *(a.format(tmp=tmp_path) for a in command[1:])]
    assert main(args) == 2
    assert capsys.readouterr().err.strip().endswith("this is an XLNet model")


@pytest.mark.parametrize("change, message", [
    ({"d_model": 64, "d_head": 16}, "d_model is 64 but the weights hold 32"),
    ({"n_layer": 3}, "n_layer is 3 but the weights hold 2 layers"),
    ({"d_inner": "48"}, "d_inner must be an integer"),
    ({"dropout": float("nan")}, "dropout must be a finite number"),
    ({"vocab_size": 10**9}, "vocab_size is 1000000000 but the weights hold"),
])
def test_config_values_are_checked_before_allocating(change, message, tmp_path, make_xlnet_folder):
    make_xlnet_folder("XLNetModel", tmp_path / "x", tokenizer=None)
    config = json.loads((tmp_path / "x" / "config.json").read_text())
    (tmp_path / "x" / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path / "x")


def test_xlnet_config_over_another_models_weights_is_named(tmp_path, make_xlnet_folder):
    from transformers import BertConfig, BertModel

    make_xlnet_folder("XLNetModel", tmp_path / "x", tokenizer=None)
    BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(str(tmp_path / "b"))
    shutil.copy(tmp_path / "b" / "model.safetensors", tmp_path / "x" / "model.safetensors")
    with pytest.raises(CheckpointError, match="model_type is 'xlnet' but the weights hold no XLNet names"):
        load_checkpoint(tmp_path / "x")
