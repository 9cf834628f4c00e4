"""A tiny GPT pre-trained on real English text on CPU: held-out perplexity vs a unigram baseline, and
cached generation checked against recomputation.

    python benchmarks/gpt.py --corpus ../shared/data/en_corpus.txt.gz --time-budget 5m

Steps: the first --max-documents documents of the corpus are split into train / held-out documents; a
byte-level BPE vocab is trained on the train documents only; a GPT-2-shaped model (default 2 layers,
hidden 128) trains on the shared loop for a wall-clock budget; held-out perplexity is compared with a
unigram model of the train tokens (add-one smoothed) on exactly the same targets. Then greedy and sampled
generation run with and without the key/value cache and must agree token for token; the model is saved
as an HF GPT-2 folder (--output) that transformers.GPT2LMHeadModel loads.
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.checkpoints.gpt2 import load_gpt2, save_gpt2
from bertkit.data.corpus import iter_documents
from bertkit.generate import GREEDY, CausalLM, SamplingConfig, generate, gpt_config
from bertkit.generate.pretrain import (GPTDataConfig, heldout_perplexity, tokenize_documents, train_causal_lm,
                                       unigram_perplexity)
from bertkit.tokenizer.bpe import train_bpe
from bertkit.train import TrainConfig


def write_documents(path: Path, docs: list[list[str]]) -> None:
    path.write_text("\n\n".join("\n".join(lines) for lines in docs) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--max-documents", type=int, default=200)
    parser.add_argument("--heldout-fraction", type=float, default=0.05)
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--time-budget", default="5m")
    parser.add_argument("--output", default=None, help="save the trained model here as a GPT-2 folder")
    parser.add_argument("--prompt", default="The government said")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    started = time.time()
    docs = []
    for lines, _ in iter_documents([args.corpus], split=False):
        docs.append(lines)
        if len(docs) >= args.max_documents:
            break
    order = np.random.default_rng(0).permutation(len(docs))
    num_heldout = max(1, round(len(docs) * args.heldout_fraction))
    heldout_ids = set(order[:num_heldout].tolist())
    with tempfile.TemporaryDirectory() as tmp:
        train_file, heldout_file = Path(tmp) / "train.txt", Path(tmp) / "heldout.txt"
        write_documents(train_file, [d for i, d in enumerate(docs) if i not in heldout_ids])
        write_documents(heldout_file, [d for i, d in enumerate(docs) if i in heldout_ids])
        tokenizer = train_bpe([train_file], vocab_size=args.vocab_size)
        train_stream = np.concatenate(tokenize_documents(tokenizer, [train_file]))
        heldout_stream = np.concatenate(tokenize_documents(tokenizer, [heldout_file]))
    prep_s = time.time() - started

    torch.manual_seed(0)
    config = gpt_config(vocab_size=tokenizer.vocab_size, hidden_size=args.hidden, num_layers=args.layers,
                        num_heads=args.heads, max_position_embeddings=max(256, args.block_size))
    model = CausalLM(config)
    data = GPTDataConfig(block_size=args.block_size, batch_size=args.batch_size)
    train_config = TrainConfig(lr=args.lr, warmup_ratio=0.05, weight_decay=0.1, adam_beta2=0.95,
                               time_budget=args.time_budget, device="cpu", progress_bar=False)
    before = heldout_perplexity(model, heldout_stream, args.block_size)["perplexity"]
    result = train_causal_lm(model, train_stream, heldout_stream, data, train_config)
    after = result.last_eval
    unigram = unigram_perplexity(train_stream, heldout_stream, args.block_size, tokenizer.vocab_size)

    prompt = tokenizer.encode(args.prompt)
    checks = {}
    for name, sampling in [("greedy", GREEDY), ("sampled", SamplingConfig(temperature=0.9, top_k=50, top_p=0.95))]:
        cached = generate(model, prompt, 40, sampling, eos_id=tokenizer.eos_id, seed=1, use_cache=True)
        plain = generate(model, prompt, 40, sampling, eos_id=tokenizer.eos_id, seed=1, use_cache=False)
        assert cached == plain, f"{name}: cached generation differs from recomputation"
        checks[name] = args.prompt + tokenizer.decode(cached.token_ids)

    if args.output:
        save_gpt2(args.output, model, tokenizer)
        reloaded = load_gpt2(args.output).model
        ids = torch.tensor([prompt])
        with torch.no_grad():
            assert torch.equal(reloaded(ids).logits, model.eval()(ids).logits)

    report = {
        "corpus": Path(args.corpus).name, "documents": len(docs), "heldout_documents": num_heldout,
        "train_tokens": int(len(train_stream)), "heldout_tokens": int(len(heldout_stream)),
        "vocab_size": tokenizer.vocab_size, "model": f"{args.layers}x{args.hidden}, {args.heads} heads, "
        f"block {args.block_size}, batch {args.batch_size}",
        "parameters": sum(p.numel() for p in model.parameters()), "steps": result.steps,
        "train_s": round(result.elapsed_s, 1), "prep_s": round(prep_s, 1),
        "tokens_seen": result.steps * args.batch_size * args.block_size,
        "heldout_perplexity_untrained": round(before, 1), "heldout_perplexity": round(after["perplexity"], 2),
        "unigram_perplexity": round(unigram, 2), "cache_equals_recomputation": True, "samples": checks,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
