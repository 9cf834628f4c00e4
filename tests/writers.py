"""Every folder bertkit writes, made by its own writer (the CLI command a user runs) on tiny data: one factory
shared by the compatibility table's test (tests/test_compatibility.py) and the round-trip test
(tests/test_round_trip.py); tests/conftest.py builds each folder once per session, on first use."""
from __future__ import annotations

import json

import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.cli import main
from bertkit.model import Encoder, EncoderConfig

WORDS = "the cat sat on mat dog hello world is".split()
FAST = ["--progress_bar=false", "--device=cpu"]


def sentences(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 5)) for i in range(n)]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _run(*args: str) -> None:
    assert main([*args]) == 0, args


def _finetune(task: str, data: str, out, model) -> None:
    _run("finetune", "--task", task, "--model", str(model), "--train", data, "--output", str(out), "--epochs", "1",
         "--batch-size", "8", "--max-length", "32", *FAST)


def folder_factory(root, tiny_model_dir, make_sentence_transformers_folder, make_tiny_roberta):
    """name -> a function building that folder (and the folders it is made from) on first use."""
    texts = sentences(24)
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
        import transformers
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

    def pretrained(objective: str):   # a 2 x 32 pre-training of `objective` on the corpus (its own vocabulary)
        return lambda out: _run("pretrain", "--config", "tiny", "--corpus", str(corpus), "--output", str(out),
                                "--objective", objective, "--max-steps", "2", "--encoder.hidden_size=32",
                                "--encoder.intermediate_size=64", "--encoder.num_heads=4", "--encoder.num_layers=2",
                                "--data.max_length=16", "--data.batch_size=8", "--data.heldout_fraction=0",
                                "--vocab.vocab_size=200", "--train.progress_bar=false")

    recipes = {
        "pre-trained ELECTRA": pretrained("electra"),
        "ELECTRA generator": lambda out: built("pre-trained ELECTRA") / "generator",
        "pre-trained SpanBERT (mlm+sbo)": pretrained("mlm+sbo"),
        "pre-trained XLNet (plm)": pretrained("plm"),
        "SimBERT": lambda out: _run("finetune", "--task", "simbert", "--model", str(built("pre-trained BERT")),
                                    "--train", pairs, "--output", str(out), "--epochs", "1", "--batch-size", "8",
                                    "--max-length", "32", *FAST),
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
        "converted": lambda out: _run("convert", str(built("sentence-transformers")), str(out)),
        "baseline": lambda out: _run("baseline", "--task", "classification", "--train", data["classification"],
                                     "--dev", data["classification"], "--output", str(out)),
        **{method: (lambda method: lambda out: _run(
            "finetune", "--task", "classification", "--model", str(built("sentence-transformers")), "--train",
            data["classification"], "--dev", data["classification"], "--output", str(out), "--method", method,
            *FAST))(method) for method in ("linear-probe", "hybrid")},
    }
    recipes["pruned (transformers/ copy)"] = lambda out: built("pruned (bertkit, smaller layers)") / "transformers"
    cache: dict = {}

    def built(name: str):
        if name not in cache:
            out = root / name.replace(" ", "_").replace("/", "")
            cache[name] = recipes[name](out) or out
        return cache[name]

    return built


