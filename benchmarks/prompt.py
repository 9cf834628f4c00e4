"""Prompt-based classification (PET, P-tuning) with a bertkit-pre-trained MLM: zero-shot vs the majority class,
and few-shot (32 labeled examples) PET / P-tuning vs plain fine-tuning of the same model on the same examples.

Data (--dataset): the Chinese review sentiment set of the developer data kit (chnsenticorp_like_{train,dev,test}
.jsonl.gz, labels pos / neg; the default) or the BBC news topics (bbc_*.jsonl.gz, 5 labels). The model is any
bertkit MLM folder whose vocabulary holds the verbalizer words as single tokens, e.g. one from `bertkit pretrain`
on zh_corpus.txt.gz (character vocabulary, whole-word masking) for the Chinese set.

    python benchmarks/prompt.py --data-dir ../shared/data --model runs/zh-mlm --draws 5 --json prompt.json

Zero-shot: every template x verbalizer below is scored on dev; the best pair (by dev accuracy, separately for
each scoring rule) is then evaluated once on test. Scoring rules, all label-free:
  raw           argmax of the verbalizer words' MLM logits at [MASK] (what `--epochs 0` reports);
  content-free  the same after subtracting the log-probabilities the pattern gives with no text in it
                (contextual calibration, Zhao et al. 2021): removes the MLM's prior for each word;
  dev prior     after subtracting the mean log-probabilities over the (unlabeled) dev texts.
Few-shot: `--draws` random draws of `--train-size` training rows (seed = draw number); for each, plain
fine-tuning (`--task classification`, a new classifier head on the pooled output), PET (the pattern and
verbalizer that content-free scoring picked on dev, all weights trained) and P-tuning (the same pattern with
learned [P] vectors in front of it, all weights trained) train with the same epochs and batch size at each of
`--lrs`, with no dev set (true few-shot: the last model is kept), and are evaluated on the full test split.
Reported: mean and standard deviation over draws, and each draw, per method and learning rate.
"""
from __future__ import annotations

from bertkit.job_config import job_config
import argparse
import gzip
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DATASETS = {   # file prefix, candidate templates and verbalizers, content-free texts (contextual calibration)
    "chnsenticorp": ("chnsenticorp_like",
                     ("{text}总之很[MASK]。", "{text}感觉很[MASK]。", "{text}真的很[MASK]！", "很[MASK]！{text}",
                      "总体来说很[MASK]。{text}", "{text}[MASK]评。"),
                     ("pos=好,neg=差", "pos=好,neg=坏", "pos=好,neg=烂", "pos=棒,neg=差", "pos=赞,neg=差",
                      "pos=满,neg=差"),
                     ("", "无", "。")),
    "bbc": ("bbc",
            ("{text} This article is about [MASK].", "[MASK] news: {text}", "{text} Topic: [MASK].",
             "A [MASK] story. {text}"),
            ("business=business,entertainment=entertainment,politics=politics,sports=sports,tech=technology",
             "business=economy,entertainment=film,politics=government,sports=football,tech=computers",
             "business=business,entertainment=music,politics=politics,sports=sport,tech=internet"),
            ("", "N/A", ".")),
}


def read_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def log_probs(scores: np.ndarray) -> np.ndarray:
    """Verbalizer logits -> log-probabilities over the labels' words."""
    top = scores.max(axis=-1, keepdims=True)
    return scores - top - np.log(np.exp(scores - top).sum(axis=-1, keepdims=True))


def accuracy(scores: np.ndarray, gold: np.ndarray) -> float:
    return float((scores.argmax(axis=-1) == gold).mean())


def zero_shot(args, checkpoint, dev: list[dict], test: list[dict]) -> dict:
    from bertkit.finetune.prompt.pet import Pattern, PETClassifier, Verbalizer
    from bertkit.finetune.prompt.job import label_scores

    verbalizers = [Verbalizer.parse(spec, checkpoint.tokenizer) for spec in args.verbalizers]
    # One pass per template scores every candidate word at [MASK]; each verbalizer then picks its columns.
    words = sorted({i for v in verbalizers for i in v.token_ids})
    all_words = Verbalizer(tuple(map(str, words)), tuple(words))
    grid = []
    for template in args.templates:
        model = PETClassifier(checkpoint.encoder, checkpoint.heads["mlm"], checkpoint.tokenizer,
                              Pattern.parse(template), all_words, args.max_length)
        logits = {name: label_scores(model, [r["text"] for r in rows]) for name, rows in (("dev", dev), ("test", test))}
        logits["content-free"] = label_scores(model, list(DATASETS[args.dataset][3]))
        for spec, verbalizer in zip(args.verbalizers, verbalizers):
            columns = [words.index(i) for i in verbalizer.token_ids]
            lp = {name: log_probs(values[:, columns]) for name, values in logits.items()}
            gold = {name: np.array([verbalizer.labels.index(r["label"]) for r in rows])
                    for name, rows in (("dev", dev), ("test", test))}
            offsets = {"raw": 0.0, "content-free": lp["content-free"].mean(axis=0), "dev prior": lp["dev"].mean(axis=0)}
            row = {"template": template, "verbalizer": spec}
            for rule, offset in offsets.items():
                row[rule] = {split: accuracy(lp[split] - offset, gold[split]) for split in ("dev", "test")}
            grid.append(row)
            print(f"  {template:22s} {spec:14s} " + "  ".join(f"{rule} dev {row[rule]['dev']:.3f}"
                                                             for rule in offsets), file=sys.stderr, flush=True)
    best = {}
    for rule in ("raw", "content-free", "dev prior"):
        pick = max(grid, key=lambda row: row[rule]["dev"])      # chosen on dev only
        best[rule] = {"template": pick["template"], "verbalizer": pick["verbalizer"], **pick[rule]}
    return {"best": best, "grid": grid}


def majority(train: list[dict], rows: list[dict]) -> float:
    label = max(set(r["label"] for r in train), key=[r["label"] for r in train].count)
    return sum(r["label"] == label for r in rows) / len(rows)


def draw(train: list[dict], size: int, seed: int, path: Path) -> Path:
    rng = random.Random(seed)
    while True:                      # a draw with a single label cannot train a two-way classifier
        rows = rng.sample(train, size)
        if len({r["label"] for r in rows}) > 1:
            break
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"text": row["text"], "label": row["label"]}, ensure_ascii=False) + "\n")
    return path


def few_shot(args, data: Path, work: Path, template: str, verbalizer: str) -> list[dict]:
    from bertkit.finetune import FinetuneConfig, evaluate_file, run_finetune
    from bertkit.finetune.prompt.job import PromptConfig, evaluate_prompt_file, run_prompt_finetune

    prefix = DATASETS[args.dataset][0]
    train = read_rows(data / f"{prefix}_train.jsonl.gz")
    test_path = data / f"{prefix}_test.jsonl.gz"
    ptuning_template = "[P]" * args.prompt_slots + template
    results: dict[str, dict[float, list[float]]] = {"fine-tuning": {}, "PET": {}, "P-tuning": {}}
    for k in range(args.draws):
        path = draw(train, args.train_size, k, work / f"draw{k}.jsonl")
        for lr in args.lrs:
            started = time.perf_counter()
            common = dict(model=args.model, epochs=args.epochs, lr=lr, batch_size=args.batch_size,
                          max_length=args.max_length, progress_bar=False, device="cpu", train=str(path), seed=k)
            out = work / f"ft{k}-{lr}"
            run_finetune(job_config(FinetuneConfig, task="classification", output=str(out), **common))
            results["fine-tuning"].setdefault(lr, []).append(evaluate_file(out, test_path)["accuracy"])
            out = work / f"pet{k}-{lr}"
            run_prompt_finetune(job_config(PromptConfig, template=template, verbalizer=verbalizer, output=str(out), **common))
            results["PET"].setdefault(lr, []).append(evaluate_prompt_file(out, test_path)["accuracy"])
            out = work / f"pt{k}-{lr}"
            run_prompt_finetune(job_config(PromptConfig, template=ptuning_template, verbalizer=verbalizer, ptuning=True,
                                             output=str(out), **common))
            results["P-tuning"].setdefault(lr, []).append(evaluate_prompt_file(out, test_path)["accuracy"])
            print(f"  draw {k} lr {lr:g}: " + "  ".join(f"{name} {by_lr[lr][-1]:.3f}" for name, by_lr in
                  results.items()) + f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    return [{"method": name, "lr": lr, "mean": statistics.mean(values),
             "std": statistics.stdev(values) if len(values) > 1 else 0.0, "draws": values}
            for name, by_lr in results.items() for lr, values in by_lr.items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", required=True, help="a bertkit MLM folder whose vocabulary holds the words")
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="chnsenticorp")
    parser.add_argument("--templates", nargs="+", default=None, help="default: the data set's candidates")
    parser.add_argument("--verbalizers", nargs="+", default=None)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--draws", type=int, default=5, help="few-shot training sets drawn (0: zero-shot only)")
    parser.add_argument("--train-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lrs", type=float, nargs="+", default=(1e-4, 1e-3),
                        help="every method trains at each learning rate; all are reported")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--prompt-slots", type=int, default=4, help="P-tuning: [P] vectors before the pattern")
    parser.add_argument("--work", type=Path, default=None, help="folder for the few-shot models (default: temp)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from bertkit.checkpoints import load_checkpoint

    data, (prefix, templates, verbalizers, _) = args.data_dir, DATASETS[args.dataset]
    args.templates, args.verbalizers = args.templates or templates, args.verbalizers or verbalizers
    train, dev, test = (read_rows(data / f"{prefix}_{split}.jsonl.gz") for split in ("train", "dev", "test"))
    report = {"model": args.model, "dataset": args.dataset, "majority": {"dev": majority(train, dev), "test": majority(train, test)}}
    print("zero-shot grid (dev accuracy):", file=sys.stderr)
    report["zero_shot"] = zero_shot(args, load_checkpoint(args.model), dev, test)
    best = report["zero_shot"]["best"]
    print(f"\nmajority class: dev {report['majority']['dev']:.3f}  test {report['majority']['test']:.3f}")
    print("| zero-shot scoring | template | verbalizer | dev acc | test acc |\n|---|---|---|---:|---:|")
    for rule, pick in best.items():
        print(f"| {rule} | `{pick['template']}` | `{pick['verbalizer']}` | {pick['dev']:.3f} | {pick['test']:.3f} |")
    if args.draws:
        with tempfile.TemporaryDirectory() as tmp:
            work = args.work or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            report["few_shot"] = few_shot(args, data, work, best["content-free"]["template"],
                                          best["content-free"]["verbalizer"])
        report["few_shot_settings"] = {k: getattr(args, k) for k in ("train_size", "draws", "epochs", "lrs",
                                                                     "batch_size", "prompt_slots")}
        print(f"\n{args.train_size} training examples, {args.draws} draws, test accuracy:")
        print("| method | lr | mean | std | per draw |\n|---|---:|---:|---:|---|")
        for r in report["few_shot"]:
            print(f"| {r['method']} | {r['lr']:g} | {r['mean']:.3f} | {r['std']:.3f} | "
                  f"{' '.join(f'{v:.3f}' for v in r['draws'])} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
