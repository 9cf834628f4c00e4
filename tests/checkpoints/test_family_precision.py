"""ELECTRA and XLNet folders in bf16 and int8 (--precision, bertkit quantize): each runs close to its fp32
self, or is refused in one line. The reference is the same folder loaded in fp32."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import bertkit
from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.errors import CheckpointError
from bertkit.finetune.model import FinetuneModel
from bertkit.model.int8 import Int8Linear

from test_electra_folders import electra_config, hf_folder

TEXTS = ["the cat sat on the mat", "hello world", "the dog sat", "a cat on the mat, hello!"]
BF16_MIN_COSINE = 0.999          # sentence vectors in bf16 vs fp32 (bf16 keeps 8 mantissa bits)
INT8_MIN_COSINE = 0.99           # bertkit quantize's own gate is mean >= 0.99, min >= 0.95


def min_cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def classifier_logits(folder, precision):
    checkpoint = load_checkpoint(folder, precision=precision)
    batch = checkpoint.tokenizer.pad_to_tensors(checkpoint.tokenizer.encode_batch(TEXTS))   # XLNet: on the left
    with torch.no_grad():
        return FinetuneModel(checkpoint.encoder, checkpoint.heads["classifier"], "classification")(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).float()


@pytest.fixture
def folders(tmp_path, make_xlnet_folder):
    import transformers

    hf_folder(transformers.ElectraForSequenceClassification, electra_config(), tmp_path / "electra")
    make_xlnet_folder("XLNetForSequenceClassification", tmp_path / "xlnet")
    return {"electra": tmp_path / "electra", "xlnet": tmp_path / "xlnet"}


@pytest.mark.parametrize("family", ["electra", "xlnet"])
def test_bf16_runs_close_to_fp32(family, folders):
    folder = folders[family]
    model = bertkit.load(folder, precision="bf16")
    assert model.precision == "bf16"
    assert all(p.dtype == torch.bfloat16 for p in model.encoder.parameters())
    assert min_cosine(model.encode(TEXTS), bertkit.load(folder).encode(TEXTS)) >= BF16_MIN_COSINE
    fp32, bf16 = classifier_logits(folder, "fp32"), classifier_logits(folder, "bf16")
    assert torch.equal(fp32.argmax(-1), bf16.argmax(-1))
    assert (fp32 - bf16).abs().max() <= 0.02 * fp32.abs().max() + 0.02


def test_electra_int8_folder_runs_and_converts_back_for_transformers(tmp_path, folders):
    import transformers

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 5) + "\n", encoding="utf-8")
    assert main(["quantize", "--model", str(folders["electra"]), "--output", str(tmp_path / "int8"),
                 "--texts", str(texts)]) == 0
    model = bertkit.load(tmp_path / "int8")
    assert model.precision == "int8" and isinstance(model.encoder.blocks[0].attention.out, Int8Linear)
    assert model.encoder.embeddings.project is not None          # ELECTRA's embedding projection survives
    assert min_cosine(model.encode(TEXTS), bertkit.load(folders["electra"]).encode(TEXTS)) >= INT8_MIN_COSINE
    assert main(["convert", str(tmp_path / "int8"), str(tmp_path / "back")]) == 0        # fp32 again
    reference = load_checkpoint(tmp_path / "int8", precision="fp32")
    hf = transformers.ElectraForSequenceClassification.from_pretrained(str(tmp_path / "back")).eval()
    batch = reference.tokenizer.pad_to_tensors(reference.tokenizer.encode_batch(TEXTS))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        ours = FinetuneModel(reference.encoder, reference.heads["classifier"], "classification")(
            ids, mask, torch.zeros_like(ids))
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    assert (ours - theirs).abs().max() <= 1e-4


def test_xlnet_int8_is_refused_in_one_line(tmp_path, folders, capsys):
    folder = folders["xlnet"]
    capsys.readouterr()
    assert main(["quantize", "--model", str(folder), "--output", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.endswith("this is an XLNet model") and not (tmp_path / "q").exists()
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    assert main(["encode", "--model", str(folder), "--precision", "int8", "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "v.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bertkit quantize" in err
    # a hand-made XLNet folder holding int8 tensors is named, not read as floats
    weights = load_file(str(folder / "model.safetensors"))
    name = "transformer.layer.0.ff.layer_1.weight"
    weights[name] = weights[name].to(torch.int8)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"{folder}: {name} holds torch.int8 values"):
        load_checkpoint(folder)
    assert json.loads((folder / "config.json").read_text())["model_type"] == "xlnet"
