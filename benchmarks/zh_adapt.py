"""A Chinese encoder from all-MiniLM-L6-v2, then the default fine-tune on chnsenticorp_like (issue 19).

    python benchmarks/zh_adapt.py --data-dir ../shared/data --work /tmp/zh --minutes 1.5 2.5 --lrs 2e-4 5e-4

No Chinese encoder is reachable offline, so the Chinese model is built the way a user without one would:
  1. `bertkit vocab extend` adds the corpus's CJK characters to MiniLM's vocabulary (MiniLM maps 63% of them to
     [UNK]); the new rows start at the mean embedding.
  2. domain-adaptive MLM on zh_corpus.txt.gz (People's Daily + the training reviews; jieba whole-word masking);
  3. task-adaptive MLM on the training reviews alone, one review per document (Gururangan et al. 2020; no labels,
     no dev or test text);
  4. `bertkit finetune` with no flag beyond model and data (the default recipe), then `bertkit evaluate` on test.
Each learning rate in --lrs is one such chain; the chains run at the same time. --minutes gives the two MLM
stages' training time (the schedule is fitted to it); 0 skips a stage (`--extended ADAPTED --minutes 0 4` goes on
with the task-adaptive stage of a model already adapted). On a CUDA machine every step runs there (bf16 autocast);
on a CPU this is hours, as BENCHMARKS.md's earlier issue-19 sections measured. Prints one markdown row per chain
and writes results.json in --work.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from electra_vs_mlm import last_json_text  # noqa: E402
from machine import cpu_description  # noqa: E402
from run_bertkit import bertkit  # noqa: E402

from bertkit.api import minilm_path  # noqa: E402

TASK = "chnsenticorp_like"


def review_corpus(train: Path, out: Path) -> Path:
    """The training reviews, one document each (the task-adaptive corpus: texts only)."""
    with gzip.open(train, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"].strip() for line in f if line.strip()]
    out.write_text("\n\n".join(t for t in texts if t) + "\n", encoding="utf-8")
    return out


def chain(lr: str, args, base: Path, reviews: Path, split: dict[str, str]) -> dict:
    work = args.work / f"lr{lr}"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    common = ["--masking", "whole-word", "--data.segmenter=jieba", f"--data.batch_size={args.batch_size}",
              f"--train.lr={lr}", "--train.warmup_ratio=0.06", "--train.progress_bar=false"]
    row: dict = {"lr": lr, "batch_size": args.batch_size}
    model = base
    for stage, corpus, minutes in (("dapt", args.data_dir / "zh_corpus.txt.gz", args.minutes[0]),
                                   ("tapt", reviews, args.minutes[1])):
        if minutes <= 0:
            continue
        started = time.time()
        out = last_json_text(bertkit("pretrain", "--model", str(model), "--corpus", str(corpus), "--output",
                                     str(work / stage), "--time-budget", f"{minutes * 60:.0f}s", *common,
                                     log=log, threads=args.threads))
        row[stage] = {"steps": out.get("steps"), "wall_s": round(time.time() - started, 1),
                      **{k: out[k] for k in ("eval_mlm_accuracy", "eval_perplexity") if k in out}}
        model = work / stage
    if args.no_finetune:
        return row
    started = time.time()
    bertkit("finetune", "--task", "classification", "--model", str(model), "--train", split["train"], "--dev",
            split["dev"], "--output", str(work / "cls"), *([] if args.baseline else ["--no-baseline"]),
            *([f"--data.max_train_examples={args.limit}", f"--data.max_dev_examples={args.limit}"]
              if args.limit else []),
            log=log, threads=args.threads)
    metrics = json.loads((work / "cls" / "metrics.json").read_text())
    row["finetune"] = {"wall_s": round(time.time() - started, 1), "dev_accuracy": metrics["dev"].get("accuracy"),
                       "epochs": metrics.get("epochs")}
    test = last_json_text(bertkit("evaluate", "--model", str(work / "cls"), "--input", split["test"], log=log,
                                  threads=args.threads))
    row["test"] = {"accuracy": test["accuracy"], "macro_f1": test["macro_f1"]}
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", help="the English model to start from (default: MiniLM from its PyPI package)")
    parser.add_argument("--extended", type=Path, help="skip step 1: this folder already has the Chinese vocabulary")
    parser.add_argument("--work", type=Path, default=Path("/tmp/zh-adapt"))
    parser.add_argument("--minutes", type=float, nargs=2, default=(1.5, 2.5), metavar=("DAPT", "TAPT"))
    parser.add_argument("--lrs", nargs="+", default=["2e-4"], help="one chain per learning rate, run at once")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads of each process")
    parser.add_argument("--baseline", action="store_true", help="also fit the TF-IDF baseline in each fine-tune")
    parser.add_argument("--no-finetune", action="store_true", help="stop after the two MLM stages")
    parser.add_argument("--limit", type=int, help="fine-tune on the first N training and dev rows (smoke runs)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"# {cpu_description()}", flush=True)
    split = {s: str(args.data_dir / f"{TASK}_{s}.jsonl.gz") for s in ("train", "dev", "test")}
    base = args.extended
    if base is None:
        model = args.model
        if model is None:
            model = str(minilm_path())
        base = args.work / "extended"
        bertkit("vocab", "extend", "--model", model, "--corpus", str(args.data_dir / "zh_corpus.txt.gz"),
                "--output", str(base), "--min-count", "2", log=args.work / "extend.log", threads=args.threads)
    reviews = review_corpus(Path(split["train"]), args.work / "reviews.txt")
    with ThreadPoolExecutor(len(args.lrs)) as pool:
        rows = list(pool.map(lambda lr: chain(lr, args, base, reviews, split), args.lrs))
    print("| lr | batch | DAPT steps / MLM acc | TAPT steps / MLM acc | dev acc | test acc / macro-F1 |")
    print("|---|---:|---|---|---:|---:|")
    for r in rows:
        stages = [f"{r[s]['steps']} / {r[s].get('eval_mlm_accuracy', float('nan')):.3f}" if s in r else "-"
                  for s in ("dapt", "tapt")]
        dev = r.get("finetune", {}).get("dev_accuracy")
        test = r.get("test")
        dev_cell = "-" if dev is None else f"{dev:.4f}"
        test_cell = "-" if test is None else f"{test['accuracy']:.4f} / {test['macro_f1']:.4f}"
        print(f"| {r['lr']} | {r['batch_size']} | {stages[0]} | {stages[1]} | {dev_cell} | {test_cell} |")
    (args.work / "results.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
