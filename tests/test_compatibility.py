"""README's compatibility table, row by row: every folder type bertkit writes, made by its own writer on tiny
data, then loaded by the library the table names and compared with bertkit's outputs (1e-4). Types no
transformers class computes are refused by `bertkit convert` with the reason, and transformers refuses the
folder (model_type "bertkit") or finds no model in it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.checkpoints.hf_check import compare_with_transformers
from bertkit.cli import main
from bertkit.conversion import convert
from bertkit.errors import BertkitError
from bertkit.model import Encoder, EncoderConfig

transformers = pytest.importorskip("transformers")

WORDS = "the cat sat on mat dog hello world is".split()
FAST = ["--progress_bar=false", "--device=cpu"]


def _sentences(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 5)) for i in range(n)]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _run(*args: str) -> None:
    assert main([*args]) == 0, args


def _finetune(task: str, data: str, out, model) -> None:
    _run("finetune", "--task", task, "--model", str(model), "--train", data, "--output", str(out), "--epochs", "1",
         "--batch-size", "8", "--max-length", "32", *FAST)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model_dir, make_sentence_transformers_folder, make_tiny_roberta):
    root = tmp_path_factory.mktemp("compat")
    texts = _sentences(24)
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    label = lambda t: "animal" if "cat" in t or "dog" in t else "other"   # noqa: E731
    data = {
        "classification": _jsonl(root / "cls.jsonl", [{"text": t, "label": label(t)} for t in texts]),
        "pair-classification": _jsonl(root / "pair.jsonl", [{"text": t, "text_pair": texts[-1 - i],
                                                             "label": label(texts[-1 - i])}
                                                            for i, t in enumerate(texts)]),
        "regression": _jsonl(root / "reg.jsonl", [{"text": t, "label": len(t) / 10} for t in texts]),
        "multi-label": _jsonl(root / "ml.jsonl", [{"text": t, "label": [w for w in ("cat", "dog") if w in t] or ["none"]}
                                                  for t in texts]),
        "ner": _jsonl(root / "ner.jsonl", [{"tokens": t.split(), "tags": ["B-ANI" if w in ("cat", "dog") else "O"
                                                                         for w in t.split()]} for t in texts]),
    }
    squad = {"version": "v1.1", "data": [{"title": "t", "paragraphs": [{"context": t, "qas": [
        {"id": str(i), "question": "what sat", "answers": [{"text": t.split()[0], "answer_start": 0}]}]}
        for i, t in enumerate(texts)]}]}
    (root / "qa.json").write_text(json.dumps(squad), encoding="utf-8")
    data["qa"] = str(root / "qa.json")
    data["rerank"] = _jsonl(root / "rerank.jsonl", [{"query": t, "positive": texts[-1 - i], "negative": texts[i - 1]}
                                                    for i, t in enumerate(texts)])
    pairs = _jsonl(root / "pairs.jsonl", [{"source": t, "target": texts[-1 - i]} for i, t in enumerate(texts)])
    prompt = ["--task", "classification", "--model", None, "--train", data["classification"], "--epochs", "1",
              "--batch-size", "8", "--max-length", "32", "--verbalizer", "animal=cat,other=dog", *FAST]

    def prompted(out, *flags):
        prompt[3] = str(built("pre-trained BERT"))
        _run("finetune", *prompt, "--output", str(out), *flags)

    documents = root / "documents.txt"       # blank lines between documents: sentence-order pairs within each
    documents.write_text("\n\n".join("\n".join(texts[d::4]) for d in range(4)) + "\n", encoding="utf-8")

    def albert(out):   # factorized embeddings, all layers shared, MLM + sentence order: AlbertForPreTraining
        _run("pretrain", "--config", "tiny", "--corpus", str(documents), "--output", str(out),
             "--max-steps", "2", "--encoder.hidden_size=32", "--encoder.intermediate_size=64",
             "--encoder.num_heads=4", "--encoder.num_layers=3", "--encoder.embedding_size=16",
             "--encoder.share_layers=all", "--data.objective=mlm+sop", "--data.max_length=16",
             "--data.batch_size=8", "--data.heldout_fraction=0", "--vocab.vocab_size=200",
             "--train.progress_bar=false")

    def roberta(out):
        tokenizer, config = make_tiny_roberta(root / "bpe", texts, vocab_size=300)
        torch.manual_seed(0)
        transformers.RobertaForMaskedLM(config).save_pretrained(str(root / "hf-roberta"))
        tokenizer.save_pretrained(str(root / "hf-roberta"))
        _run("convert", str(root / "hf-roberta"), str(out))

    def pre_ln(out):
        torch.manual_seed(0)
        config = EncoderConfig(vocab_size=60, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                               max_position_embeddings=40, norm_position="pre")
        save_checkpoint(out, Encoder(config).eval(), None)

    def gpt2(out):
        from bertkit.checkpoints.gpt2 import save_gpt2
        from bertkit.generate import CausalLM, gpt_config
        torch.manual_seed(0)
        save_gpt2(out, CausalLM(gpt_config(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                                           max_position_embeddings=32)).eval())

    def index(out):
        docs = _jsonl(root / "docs.jsonl", [{"id": str(i), "text": t} for i, t in enumerate(texts)])
        _run("index", "build", "--model", str(tiny_model_dir), "--input", docs, "--index", str(out))

    recipes = {
        "pre-trained BERT": lambda out: _run("pretrain", "--config", "tiny", "--corpus",
                                             str(corpus), "--output", str(out), "--model", str(tiny_model_dir),
                                             "--max-steps", "2", "--data.max_length=16", "--data.batch_size=8",
                                             "--data.heldout_fraction=0", "--train.progress_bar=false"),
        "prompt/PET": lambda out: prompted(out, "--template", "{text} is [MASK] ."),
        "P-tuning": lambda out: prompted(out, "--template", "{text} [P] [P] [MASK] .", "--ptuning"),
        "seq2seq": lambda out: _run("finetune", "--task", "seq2seq", "--model", str(built("pre-trained BERT")),
                                    "--train", pairs, "--output", str(out), "--epochs", "1", "--batch-size", "8",
                                    "--max-length", "32", *FAST),
        "RoBERTa-style": roberta, "ALBERT": albert, "pre-LN": pre_ln, "GPT-2": gpt2,
        **{f"fine-tuned {task}": (lambda task: lambda out: _finetune(task, data[task], out, tiny_model_dir))(task)
           for task in data},
        "sentence-transformers": lambda out: make_sentence_transformers_folder(
            tiny_model_dir, out, "mean", [(32, 16, "Tanh")], normalize=True, max_seq_length=16),
        "whitened": lambda out: _run("whiten", "--model", str(built("sentence-transformers")), "--corpus",
                                     str(corpus), "--output", str(out), "--dim", "8"),
        "SimCSE": lambda out: _run("simcse", "--model", str(built("sentence-transformers")), "--train", str(corpus),
                                   "--output", str(out), "--batch-size", "8", "--max-steps", "2", *FAST),
        "distilled": lambda out: _run("distill", "--teacher", str(built("fine-tuned classification")),
                                      "--student-layers", "1", "--train", data["classification"], "--dev",
                                      data["classification"], "--output", str(out), "--epochs", "1",
                                      "--batch-size", "8", "--max-length", "32", *FAST),
        "distilled embedding": lambda out: _run("distill", "--teacher", str(built("sentence-transformers")),
                                                "--student-layers", "1", "--task", "embedding", "--train",
                                                str(corpus), "--output", str(out), "--epochs", "1", "--batch-size",
                                                "16", *FAST),
        "pruned (bertkit, smaller layers)": lambda out: _run(
            "prune-heads", "--model", str(built("fine-tuned classification")), "--output", str(out), "--dev",
            data["classification"], "--per-layer", "1"),
        "quantized int8": lambda out: _run("quantize", "--model", str(built("fine-tuned classification")),
                                           "--output", str(out)),
        "ONNX": lambda out: _run("export-onnx", "--model", str(built("sentence-transformers")), "--output",
                                 str(out / "model.onnx")),
        "index": index,
    }
    recipes["pruned (transformers/ copy)"] = lambda out: built("pruned (bertkit, smaller layers)") / "transformers"
    cache: dict = {}

    def built(name: str):
        if name not in cache:
            out = root / name.replace(" ", "_").replace("/", "")
            cache[name] = recipes[name](out) or out
        return cache[name]

    return built


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
def test_folder_loads_in_the_library_the_table_names(name, folders):
    folder = folders(name)
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
    texts = _sentences(5)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts)
    ours = bertkit.load(folder).encode(texts)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_folder_without_a_transformers_form_is_refused_with_the_reason(name, folders, tmp_path):
    folder = folders(name)
    with pytest.raises(BertkitError, match=REFUSED[name]):
        convert(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    config = folder / "config.json"
    if config.is_file() and json.loads(config.read_text())["model_type"] == "bertkit":
        with pytest.raises(ValueError, match="bertkit"):
            transformers.AutoModel.from_pretrained(str(folder))


def test_onnx_export_runs_in_onnx_runtime_with_the_model_outputs(folders):
    folder = folders("ONNX")
    texts = _sentences(5)
    np.testing.assert_allclose(bertkit.load(folder / "model.onnx").encode(texts),
                               bertkit.load(folders("sentence-transformers")).encode(texts), rtol=0, atol=1e-4)


def test_pruned_folder_is_refused_by_transformers_and_converted_to_full_shapes(folders, tmp_path):
    """bertkit's pruned folder (smaller layers) says model_type "bertkit", so transformers 5 (which ignores
    pruned_heads) refuses it instead of re-initializing the pruned layers; `bertkit convert` writes the
    full-shape copy, like prune-heads' own transformers/ subfolder."""
    folder = folders("pruned (bertkit, smaller layers)")
    meta = json.loads((folder / "bertkit.json").read_text())
    assert "pruned heads stored as physically smaller layers" in meta["transformers"]["why_not"]
    with pytest.raises(ValueError, match="bertkit"):
        transformers.AutoModelForSequenceClassification.from_pretrained(str(folder))
    report = convert(folder, tmp_path / "full")
    assert report.architecture == "BertForSequenceClassification" and report.max_difference <= 1e-4


def test_int8_folder_is_bertkit_only_and_converts_to_its_dequantized_fp32_model(folders, tmp_path):
    """An int8 folder keeps its weights in model.int8.safetensors, where transformers does not look (it refuses
    the folder rather than loading int8 values as floats); convert writes the fp32 model the int8 weights
    describe, which transformers computes exactly."""
    folder = folders("quantized int8")
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
