import json

import pytest
import torch

from bertkit.checkpoints.gpt2 import load_gpt2, save_gpt2
from bertkit.errors import CheckpointError

transformers = pytest.importorskip("transformers")


def _hf_tiny(vocab_size=300):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
    return transformers.GPT2LMHeadModel(config).eval()


def test_hf_folder_loads_with_identical_logits(tmp_path):
    hf = _hf_tiny()
    hf.save_pretrained(tmp_path)
    checkpoint = load_gpt2(tmp_path)
    ids = torch.randint(0, 300, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(checkpoint.model(ids).logits, hf(ids).logits, atol=1e-5, rtol=1e-4)
    assert checkpoint.tokenizer is None


def test_bertkit_folder_loads_in_transformers_with_identical_logits(tmp_path, tiny_model, bpe):
    save_gpt2(tmp_path, tiny_model, bpe)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 300, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, tiny_model(ids).logits, atol=1e-5, rtol=1e-4)
    text = "the cat met a dog — café"
    assert transformers.GPT2TokenizerFast.from_pretrained(tmp_path)(text)["input_ids"] == bpe.encode(text)
    assert transformers.GPT2Tokenizer.from_pretrained(tmp_path)(text)["input_ids"] == bpe.encode(text)
    again = load_gpt2(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(again.model(ids).logits, tiny_model(ids).logits)
    assert again.tokenizer.encode(text) == bpe.encode(text)


def test_bad_folders_are_named(tmp_path, tiny_model):
    with pytest.raises(CheckpointError, match="config.json"):
        load_gpt2(tmp_path)
    save_gpt2(tmp_path, tiny_model)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(CheckpointError, match="model_type"):
        load_gpt2(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    with pytest.raises(CheckpointError, match="missing"):
        load_gpt2(tmp_path)
