"""ELECTRA vs MLM at the same CPU wall-clock (Clark et al. 2020's compute-efficiency claim, checked on this machine).

    python benchmarks/electra_vs_mlm.py --minutes 10 --work /tmp/electra_bench

For each language (en: ../shared/data/en_corpus.txt.gz, fine-tuned on bbc; zh: ../shared/data/zh_corpus.txt.gz
with the tiny-zh preset, its WordPiece vocabulary trained on that corpus, fine-tuned on chnsenticorp_like):
  1. `bertkit pretrain --objective electra` and `--objective mlm`, same preset (same discriminator / BERT size,
     same vocabulary, same lr and schedule), same `--time-budget`. All pre-trainings run at the same time, one
     thread each, so both objectives of a language see the same machine load.
  2. `bertkit finetune` (the default recipe) of each folder on <task>_train / _dev, all at the same time, one thread
     each, then `bertkit evaluate` on <task>_test; `bertkit baseline` (TF-IDF) on the same split beside them.
Prints one markdown table: accuracy and macro-F1 on the test split, and the steps each pre-training reached.

`--size small` overrides the preset's body with ELECTRA-Small's (Clark et al. 2020, table 6: 12 layers x 256, 4
heads, FFN 1024, batch 128, lr 5e-4; the generator stays 1/4 wide), the scale at which the paper reports its smallest
model, for a GPU: `--size small --threads 4`. Embeddings stay the hidden width for both objectives (the paper's 128
would make the MLM model an ALBERT-style factorized BERT), so the two bodies are the same size.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_description  # noqa: E402

from bertkit.train.fit import RUN_DIR  # noqa: E402

LANGUAGES = {"en": ("tiny", "en_corpus.txt.gz", "bbc"), "zh": ("tiny-zh", "zh_corpus.txt.gz", "chnsenticorp_like")}
OBJECTIVES = ("electra", "mlm")
SIZES = {"tiny": [],
         "small": ["--encoder.hidden-size=256", "--encoder.num-layers=12", "--encoder.num-heads=4",
                   "--encoder.intermediate-size=1024", "--data.batch-size=128", "--train.lr=5e-4"]}


def threads_env(threads: int) -> dict[str, str]:
    """Each job's torch threads: the jobs run side by side and share the machine equally."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def start(args: list[str], log: Path, threads: int) -> subprocess.Popen:
    handle = log.open("w")
    return subprocess.Popen([sys.executable, "-m", "bertkit", *args], stdout=handle, stderr=subprocess.STDOUT,
                            env=threads_env(threads))


def wait_all(jobs: dict[str, subprocess.Popen], logs: dict[str, Path]) -> None:
    for name, job in jobs.items():
        if job.wait() != 0:
            raise SystemExit(f"{name} failed; see {logs[name]}:\n" + logs[name].read_text()[-2000:])


def last_json(log: Path) -> dict:
    return last_json_text(log.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="pre-training wall-clock of each model")
    parser.add_argument("--finetune-minutes", type=float, default=None,
                        help="cap each fine-tuning's wall-clock (--time-budget); default: the recipe's epochs")
    parser.add_argument("--languages", nargs="+", default=list(LANGUAGES), choices=list(LANGUAGES))
    parser.add_argument("--work", default="/tmp/electra_bench")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--no-baseline", action="store_true", help="skip the TF-IDF rows (their figures do not "
                        "change between runs: BENCHMARKS.md)")
    parser.add_argument("--size", choices=list(SIZES), default="tiny", help="the body of both models (see above)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each job")
    parser.add_argument("--option", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="one more setting of both pre-trainings, after --size's (e.g. data.batch_size=16)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"# {cpu_description()}; load before: {os.getloadavg()}", flush=True)

    jobs, logs = {}, {}
    for lang in args.languages:
        preset, corpus, _ = LANGUAGES[lang]
        for objective in OBJECTIVES:
            name = f"{lang}-{objective}"
            logs[name] = work / f"pretrain-{name}.log"
            jobs[name] = start(["pretrain", "--config", preset, "--corpus", str(args.data_dir / corpus), "--objective",
                                objective, "--output", str(work / name), "--time-budget", f"{args.minutes * 60:.0f}s",
                                "--train.progress_bar=false", "--train.eval_every=0", "--train.save_every=0",
                                *SIZES[args.size], *(f"--{option}" for option in args.option)],
                               logs[name], args.threads)
    wait_all(jobs, logs)
    pretrained = {name: last_json(log) for name, log in logs.items()}
    print(f"# pre-trained; load after: {os.getloadavg()}", flush=True)

    jobs, logs = {}, {}
    for lang in args.languages:
        task = LANGUAGES[lang][2]
        split = {s: str(args.data_dir / f"{task}_{s}.jsonl.gz") for s in ("train", "dev", "test")}
        for objective in OBJECTIVES:
            name = f"{lang}-{objective}"
            logs[name] = work / f"finetune-{name}.log"
            budget = ["--time-budget", f"{args.finetune_minutes * 60:.0f}s"] if args.finetune_minutes else []
            jobs[name] = start(["finetune", "--model", str(work / name), "--train", split["train"], "--dev",
                                split["dev"], "--output", str(work / f"{name}-{task}"), "--no-baseline", *budget],
                               logs[name], args.threads)
        if args.no_baseline:
            continue
        logs[f"{lang}-tfidf"] = work / f"baseline-{lang}.log"
        jobs[f"{lang}-tfidf"] = start(["baseline", "--train", split["train"], "--dev", split["dev"], "--test",
                                       split["test"], "--output", str(work / f"{lang}-tfidf-{task}")],
                                      logs[f"{lang}-tfidf"], args.threads)
    wait_all(jobs, logs)

    print("| language / task | model | pre-training steps (equal wall-clock) | test accuracy | test macro-F1 |")
    print("|---|---|---:|---:|---:|")
    results = {}
    for lang in args.languages:
        task = LANGUAGES[lang][2]
        test = str(args.data_dir / f"{task}_test.jsonl.gz")
        for model in (*OBJECTIVES, *(() if args.no_baseline else ("tfidf",))):
            folder = work / f"{lang}-{model}-{task}"
            out = subprocess.run([sys.executable, "-m", "bertkit", "evaluate", "--model", str(folder), "--input", test],
                                 check=True, capture_output=True, text=True, env=threads_env(args.threads)).stdout
            metrics = last_json_text(out)
            steps = pretrained.get(f"{lang}-{model}", {}).get("steps", "-")
            results[f"{lang}-{model}"] = {**metrics, "pretrain_steps": steps}
            print(f"| {lang} / {task} | {model} | {steps} | {metrics['accuracy']:.4f} | {metrics['macro_f1']:.4f} |")
    for lang in args.languages:
        print(rtd_summary(lang, pretrained[f"{lang}-electra"], work / f"{lang}-electra" / RUN_DIR / "log.jsonl"))
    print(json.dumps(results))
    return 0


def rtd_summary(lang: str, final: dict, log: Path) -> str:
    """Whether the discriminator beat the prior (always "original": accuracy 1 - replaced rate): held-out at the end,
    and the training curve as accuracy minus prior per 100 steps."""
    rows = [r for r in map(json.loads, log.read_text().splitlines()) if "rtd_accuracy" in r and "lr" in r]
    curve = []
    for i in range(0, len(rows), 100):
        window = rows[i:i + 100]
        margin = sum(r["rtd_accuracy"] - (1 - r["replaced"]) for r in window) / len(window)
        curve.append(f"{window[-1]['step']}:{margin:+.4f}")
    return (f"# {lang} discriminator: held-out RTD accuracy {final['eval_rtd_accuracy']:.4f} vs prior "
            f"{1 - final['eval_replaced']:.4f} (RTD loss {final['eval_rtd_loss']:.4f}); training accuracy - prior "
            f"per 100 steps: {' '.join(curve)}")


def last_json_text(text: str) -> dict:
    """The last top-level JSON object of a command's output (one line, or indented over several)."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{"):
            return json.loads("\n".join(lines[i:]))
    raise SystemExit(f"no JSON in: {text[-500:]}")


if __name__ == "__main__":
    raise SystemExit(main())
