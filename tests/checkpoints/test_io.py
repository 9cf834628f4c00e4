"""Saving, converting and loading folders; what loading detects."""
import json
import shutil

import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.errors import CheckpointError
from bertkit.model import Encoder, EncoderConfig
from bertkit.model.heads import MaskedLMHead, SentencePairHead, SequenceClassificationHead


def hf_outputs(folder, ids, mask):
    from transformers import AutoModel
    model = AutoModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def test_convert_minilm_loads_in_transformers_identically(minilm_dir, tmp_path):
    target = tmp_path / "converted"
    assert main(["convert", str(minilm_dir), str(target)]) == 0
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "bertkit.json"} <= {
        p.name for p in target.iterdir()}
    ids = torch.tensor([[101, 7592, 2088, 999, 102, 0], [101, 2023, 2003, 1037, 3231, 102]])
    mask = (ids != 0).long()
    torch.testing.assert_close(hf_outputs(target, ids, mask), hf_outputs(minilm_dir, ids, mask), atol=0, rtol=0)
    # Round trip bertkit -> HF folder -> bertkit is lossless, encode defaults included.
    again = bertkit.load(target)
    original = bertkit.load(minilm_dir)
    for (name, a), b in zip(original.encoder.state_dict().items(), again.encoder.state_dict().values()):
        assert torch.equal(a, b), name
    assert again.encode_defaults == original.encode_defaults


def test_round_trip_through_transformers_save(tiny_model_dir, tmp_path):
    from transformers import AutoModel
    AutoModel.from_pretrained(str(tiny_model_dir)).save_pretrained(str(tmp_path / "hf"))
    shutil.copy(tiny_model_dir / "vocab.txt", tmp_path / "hf" / "vocab.txt")
    a, b = load_checkpoint(tiny_model_dir), load_checkpoint(tmp_path / "hf")
    for (name, x), y in zip(a.encoder.state_dict().items(), b.encoder.state_dict().values()):
        assert torch.equal(x, y), name


def test_heads_save_as_hf_architectures(tmp_path, tiny_model_dir):
    from transformers import BertForPreTraining, BertForSequenceClassification

    ckpt = load_checkpoint(tiny_model_dir)
    torch.manual_seed(0)
    heads = {"mlm": MaskedLMHead(ckpt.config), "pair": SentencePairHead(ckpt.config)}
    save_checkpoint(tmp_path / "pre", ckpt.encoder, ckpt.tokenizer, heads)
    ids = torch.tensor([[2, 40, 41, 3, 0]])
    mask = (ids != 0).long()
    ref = BertForPreTraining.from_pretrained(str(tmp_path / "pre")).eval()
    with torch.no_grad():
        out = ref(input_ids=ids, attention_mask=mask)
        hidden = ckpt.encoder(ids, mask)
        mlm = heads["mlm"](hidden.last_hidden_state, ckpt.encoder.embeddings.token.weight)
        pair = heads["pair"](hidden.pooled_output)
    torch.testing.assert_close(out.prediction_logits, mlm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.seq_relationship_logits, pair, atol=1e-5, rtol=1e-5)
    reloaded = load_checkpoint(tmp_path / "pre")
    assert set(reloaded.heads) == {"mlm", "pair"}

    classifier = SequenceClassificationHead(ckpt.config, num_labels=3).eval()
    save_checkpoint(tmp_path / "cls", ckpt.encoder, ckpt.tokenizer, {"classifier": classifier},
                    meta={"task": "classification", "labels": ["a", "b", "c"]})
    ref = BertForSequenceClassification.from_pretrained(str(tmp_path / "cls")).eval()
    with torch.no_grad():
        torch.testing.assert_close(ref(input_ids=ids, attention_mask=mask).logits,
                                   classifier(ckpt.encoder(ids, mask).pooled_output), atol=1e-5, rtol=1e-5)
    assert load_checkpoint(tmp_path / "cls").heads["classifier"].num_labels == 3


def test_variants_round_trip(tmp_path, tiny_model_dir):
    tokenizer = load_checkpoint(tiny_model_dir).tokenizer
    for changes in ({"share_layers": "all"}, {"norm_position": "pre"}, {"embedding_size": 16}):
        config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                               intermediate_size=64, max_position_embeddings=64, **changes)
        encoder = Encoder(config).eval()
        save_checkpoint(tmp_path / "v", encoder, tokenizer)
        loaded = load_checkpoint(tmp_path / "v")
        assert loaded.config == config
        ids = torch.tensor([[2, 20, 21, 3]])
        torch.testing.assert_close(loaded.encoder(ids).last_hidden_state, encoder(ids).last_hidden_state)


def test_detects_lfs_pointer_truncation_and_mismatches(tmp_path, tiny_model_dir):
    def copy(name):
        folder = tmp_path / name
        shutil.copytree(tiny_model_dir, folder)
        return folder

    folder = copy("lfs")
    (folder / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\n")
    with pytest.raises(CheckpointError, match="git-lfs pointer"):
        load_checkpoint(folder)

    folder = copy("truncated")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(folder)

    folder = copy("shape")
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 128
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(folder)

    folder = copy("vocab")
    with open(folder / "vocab.txt", "a") as handle:
        handle.write("\n".join(f"extra{i}" for i in range(200)) + "\n")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer has"):
        load_checkpoint(folder)

    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_checkpoint(empty)


def test_google_folder_and_tf_names(tmp_path, tiny_model_dir):
    import numpy as np
    from bertkit.checkpoints.google import tf_variables_to_hf

    names = tf_variables_to_hf({
        "bert/encoder/layer_0/attention/self/query/kernel": np.ones((4, 8)),
        "bert/embeddings/word_embeddings": np.ones((10, 4)),
        "bert/embeddings/LayerNorm/gamma": np.ones(4),
        "cls/predictions/output_bias": np.ones(10),
        "bert/encoder/layer_0/attention/self/query/kernel/adam_m": np.ones((4, 8)),
        "global_step": np.array(1),
    })
    assert set(names) == {"bert.encoder.layer.0.attention.self.query.weight", "bert.embeddings.word_embeddings.weight",
                          "bert.embeddings.LayerNorm.weight", "cls.predictions.bias"}
    assert names["bert.encoder.layer.0.attention.self.query.weight"].shape == (8, 4)   # kernels are transposed

    folder = tmp_path / "google"
    folder.mkdir()
    shutil.copy(tiny_model_dir / "config.json", folder / "bert_config.json")
    shutil.copy(tiny_model_dir / "vocab.txt", folder / "vocab.txt")
    (folder / "bert_model.ckpt.index").write_bytes(b"")
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        with pytest.raises(CheckpointError, match="needs tensorflow"):
            load_checkpoint(folder)
    shutil.copy(tiny_model_dir / "model.safetensors", folder / "model.safetensors")
    assert load_checkpoint(folder).config.hidden_size == 32


def test_save_is_atomic_and_keeps_other_files(tmp_path, tiny_model_dir, monkeypatch):
    ckpt = load_checkpoint(tiny_model_dir)
    target = tmp_path / "model"
    save_checkpoint(target, ckpt.encoder, ckpt.tokenizer)
    (target / "metrics.json").write_text("{}")
    before = (target / "model.safetensors").read_bytes()

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")
    monkeypatch.setattr(type(ckpt.tokenizer), "save", explode)
    with pytest.raises(RuntimeError):
        save_checkpoint(target, ckpt.encoder, ckpt.tokenizer)
    assert (target / "model.safetensors").read_bytes() == before      # the old folder is untouched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp folders left
    monkeypatch.undo()
    save_checkpoint(target, ckpt.encoder, ckpt.tokenizer)
    assert (target / "metrics.json").exists()
