"""README's compatibility table, row by row: every folder type bertkit writes, made by its own writer on tiny
data, then loaded by the library the table names and compared with bertkit's outputs (1e-4). Types no
transformers class computes are refused by `bertkit convert` with the reason, and transformers refuses the
folder (model_type "bertkit") or finds no model in it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bertkit
from bertkit.checkpoints import load_checkpoint
from bertkit.checkpoints.hf_check import compare_with_transformers
from bertkit.conversion import convert
from bertkit.errors import BertkitError
from writers import sentences

transformers = pytest.importorskip("transformers")

# folder type -> the transformers class that loads it (None: none does), and whether sentence-transformers does
LOADS = {
    "pre-trained BERT": ("BertForMaskedLM", True), "RoBERTa-style": ("RobertaForMaskedLM", True),
    "ALBERT": ("AlbertForPreTraining", False), "GPT-2": ("GPT2LMHeadModel", False),
    "fine-tuned classification": ("BertForSequenceClassification", True),
    "fine-tuned pair-classification": ("BertForSequenceClassification", True),
    "fine-tuned regression": ("BertForSequenceClassification", True),
    "fine-tuned multi-label": ("BertForSequenceClassification", True),
    "fine-tuned rerank": ("BertForSequenceClassification", True),
    "prompt/PET": ("BertForMaskedLM", False), "P-tuning": ("BertForMaskedLM", False),
    "seq2seq": ("BertForMaskedLM", False),
    "fine-tuned ner": ("BertForTokenClassification", True), "fine-tuned qa": ("BertForQuestionAnswering", True),
    "sentence-transformers": ("BertModel", True), "whitened": ("BertModel", False),
    "SimCSE": ("BertModel", True), "distilled embedding": ("BertModel", True),
    "distilled": ("BertForSequenceClassification", True),
    "pruned (transformers/ copy)": ("BertForSequenceClassification", True),
}
REFUSED = {
    "pre-LN": "pre-LN", "ONNX": "an ONNX export", "index": "a search index",
}


@pytest.mark.parametrize("name", sorted(LOADS))
def test_folder_loads_in_the_library_the_table_names(name, written_folders):
    folder = written_folders(name)
    architecture, expected_st = LOADS[name]
    if architecture == "GPT2LMHeadModel":
        from bertkit.checkpoints.gpt2 import load_gpt2
        reference = load_gpt2(folder).model
    else:
        reference = load_checkpoint(folder)
    found, difference = compare_with_transformers(folder, reference)
    assert found == architecture and difference <= 1e-4
    assert (folder / "modules.json").exists() == expected_st, "sentence-transformers modules as the table says"
    if not expected_st:
        entry = json.loads((folder / "bertkit.json").read_text()).get("sentence_transformers") \
            if (folder / "bertkit.json").is_file() else None
        if name == "whitened":       # no modules.json: bertkit.json says why sentence-transformers cannot
            assert entry == {"loads": False, "why_not": 'it has no whitening module (bertkit.json "whitening")'}
            assert not (folder / "modules.json").exists()
        return
    from sentence_transformers import SentenceTransformer
    texts = sentences(5)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts)
    ours = bertkit.load(folder).encode(texts)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_folder_without_a_transformers_form_is_refused_with_the_reason(name, written_folders, tmp_path):
    folder = written_folders(name)
    with pytest.raises(BertkitError, match=REFUSED[name]):
        convert(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    config = folder / "config.json"
    if config.is_file() and json.loads(config.read_text())["model_type"] == "bertkit":
        with pytest.raises(ValueError, match="bertkit"):
            transformers.AutoModel.from_pretrained(str(folder))


def test_onnx_export_runs_in_onnx_runtime_with_the_model_outputs(written_folders):
    folder = written_folders("ONNX")
    texts = sentences(5)
    np.testing.assert_allclose(bertkit.load(folder / "model.onnx").encode(texts),
                               bertkit.load(written_folders("sentence-transformers")).encode(texts), rtol=0, atol=1e-4)


def test_pruned_folder_is_refused_by_transformers_and_converted_to_full_shapes(written_folders, tmp_path):
    """bertkit's pruned folder (smaller layers) says model_type "bertkit", so transformers 5 (which ignores
    pruned_heads) refuses it instead of re-initializing the pruned layers; `bertkit convert` writes the
    full-shape copy, like prune-heads' own transformers/ subfolder."""
    folder = written_folders("pruned (bertkit, smaller layers)")
    meta = json.loads((folder / "bertkit.json").read_text())
    assert "pruned heads stored as physically smaller layers" in meta["transformers"]["why_not"]
    with pytest.raises(ValueError, match="bertkit"):
        transformers.AutoModelForSequenceClassification.from_pretrained(str(folder))
    report = convert(folder, tmp_path / "full")
    assert report.architecture == "BertForSequenceClassification" and report.max_difference <= 1e-4


def test_int8_folder_is_bertkit_only_and_converts_to_its_dequantized_fp32_model(written_folders, tmp_path):
    """An int8 folder keeps its weights in model.int8.safetensors, where transformers does not look (it refuses
    the folder rather than loading int8 values as floats); convert writes the fp32 model the int8 weights
    describe, which transformers computes exactly."""
    folder = written_folders("quantized int8")
    meta = json.loads((folder / "bertkit.json").read_text())
    assert meta["hf_compatible"] is False and "int8" in meta["transformers"]["why_not"]
    assert not (folder / "modules.json").exists()
    with pytest.raises(OSError):
        transformers.AutoModelForSequenceClassification.from_pretrained(str(folder))
    report = convert(folder, tmp_path / "fp32")
    assert report.architecture == "BertForSequenceClassification" and report.max_difference <= 1e-4
    assert "(int8 weights dequantized to fp32)" in report.line()
    found, difference = compare_with_transformers(tmp_path / "fp32", load_checkpoint(folder, precision="fp32"))
    assert found == "BertForSequenceClassification" and difference <= 1e-4
