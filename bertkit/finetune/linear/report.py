"""The TF-IDF baseline beside every result: a side-by-side table on dev, and one plain line when the model
loses to the baseline or its predictions collapse onto a few classes, with what to try.

Collapse: the top one (two classes: one) or two predicted classes take >= 90% of the dev predictions while
they hold <= 75% of the gold labels, or macro-F1 is >= 15 points under the baseline's. Both are the
signature of a model that learned the label prior (the 36-class set of issue 19: accuracy 0.529 with
macro-F1 0.15, against the baseline's 0.647).

Noise: with both models' dev predictions the table adds a paired line: how many dev texts only the model got
right, how many only the baseline, and McNemar's exact test on those two counts (a two-sided binomial test at
1/2). A dev set of a few hundred texts cannot tell a one-text difference from chance: BBC's default fine-tune
averages one text of 419 under TF-IDF on test over 16 seeds and beats it in a third of the runs (BENCHMARKS.md,
"The BBC recipe over 16 seeds"), so "loses" and "wins" there say nothing without it. The counts are the saved
models' own dev predictions; the hybrid over a fine-tuned model reports a cross-fitted dev score (hybrid.py), so
its accuracy row can differ from them by a text or two.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

COLLAPSE_SHARE = 0.9          # of dev predictions in the top 1-2 predicted classes...
SPREAD_SHARE = 0.75           # ...while the same number of gold classes holds at most this
MACRO_F1_GAP = 0.15           # macro-F1 this far under the baseline's counts as collapse too
NOISE_P = 0.05                # a McNemar p-value at or above this: the two models are not told apart on dev
ADVICE = "try --method hybrid (TF-IDF stacked with the model's vectors: minutes on a CPU)"
# What to try differs by what lost: a hybrid that loses already holds TF-IDF, so "try --method hybrid" is no advice
ADVICE_FOR = {
    "linear-probe": "try --method hybrid (TF-IDF stacked with the model's vectors) or fine-tuning (--method finetune)",
    "hybrid": ("the model's part adds little that TF-IDF lacks here: pass a model fine-tuned on these labels as "
               "--model (the hybrid then pools its probabilities), or one pre-trained on text like yours, or keep "
               "the TF-IDF baseline (bertkit baseline)"),
}


def finetune_advice(lr: float, epochs: int) -> str:
    """What to try after a losing fine-tune: the hybrid, or twice the epochs / learning rate this run used (a
    fixed "--lr 1e-4" told runs already at 1e-4 to try 1e-4)."""
    return f"{ADVICE}, more epochs (--epochs {2 * epochs}) or a higher learning rate (--lr {2 * lr:g})"


@dataclass
class Comparison:
    task: str
    name: str                                   # "fine-tuned", "linear-probe", "hybrid"
    model: dict                                 # dev metrics
    baseline: dict                              # the TF-IDF baseline's dev metrics
    baseline_seconds: float
    warnings: list[str] = field(default_factory=list)
    paired: Optional[dict] = None               # mcnemar() of the two models' dev predictions, when both are known

    @property
    def columns(self) -> tuple[str, ...]:
        return ("spearman", "pearson", "mse") if self.task == "regression" else ("accuracy", "macro_f1")

    def table(self) -> list[str]:
        rows = [(f"{self.name} model", self.model), (f"TF-IDF baseline ({self.baseline_seconds:.0f} s)", self.baseline)]
        width = max(len(name) for name, _ in rows)
        header = f"{'dev':<{width}}  " + "  ".join(f"{c:>9}" for c in self.columns)
        lines = [header] + [f"{name:<{width}}  " + "  ".join(f"{m.get(c, float('nan')):9.4f}" for c in self.columns)
                            for name, m in rows]
        if self.paired is not None:
            lines.append(paired_line(self.paired, f"the {self.name} model", "the baseline"))
        return lines

    def record(self) -> dict:
        return {"dev": self.baseline, "seconds": self.baseline_seconds, "model_dev": self.model,
                "table": self.table(), "warnings": self.warnings, **({"paired": self.paired} if self.paired else {})}


def mcnemar(model_right: Sequence[bool], baseline_right: Sequence[bool]) -> dict:
    """McNemar's exact test of two models on the same rows: the rows only one of them got right, and the two-sided
    binomial p-value of that split at 1/2 (1.0 when they never disagree)."""
    model_only = sum(1 for m, b in zip(model_right, baseline_right) if m and not b)
    baseline_only = sum(1 for m, b in zip(model_right, baseline_right) if b and not m)
    n = model_only + baseline_only
    tail = sum(math.comb(n, k) for k in range(min(model_only, baseline_only) + 1))
    return {"model_only": model_only, "baseline_only": baseline_only, "p_value": min(1.0, 2 * tail / 2 ** n)}


def paired_line(paired: dict, first: str, second: str, rows: str = "dev texts") -> str:
    """One line of mcnemar()'s result: how many `rows` only `first` (paired["model_only"]) and only `second`
    (paired["baseline_only"]) predict right, the p-value, and whether that is more than noise."""
    verdict = "within noise" if paired["p_value"] >= NOISE_P else "a real difference"
    return (f"{rows} only one saved model predicts right: {paired['model_only']} {first}, "
            f"{paired['baseline_only']} {second} (McNemar p = {paired['p_value']:.2g}: {verdict})")


def compare(task: str, name: str, model: dict, baseline: dict, baseline_seconds: float,
            predicted: Optional[Sequence[int]] = None, gold: Optional[Sequence[int]] = None,
            label_names: Sequence[str] = (), advice: Optional[str] = None,
            baseline_predicted: Optional[Sequence[int]] = None) -> Comparison:
    """advice: what to try when the model loses (default: by `name`, ADVICE_FOR or ADVICE). With both models'
    dev predictions (`predicted`, `baseline_predicted`) and `gold`, the comparison is also paired (mcnemar)."""
    comparison = Comparison(task, name, model, baseline, baseline_seconds)
    if predicted is not None and baseline_predicted is not None and gold is not None:
        comparison.paired = mcnemar([int(p) == int(g) for p, g in zip(predicted, gold)],
                                    [int(p) == int(g) for p, g in zip(baseline_predicted, gold)])
    advice = advice or ADVICE_FOR.get(name, ADVICE)
    if task == "regression":
        if model.get("spearman", 0.0) < baseline.get("spearman", 0.0):
            comparison.warnings.append(
                f"the {name} model loses to the TF-IDF baseline on dev (Spearman {model['spearman']:.3f} vs "
                f"{baseline['spearman']:.3f}); {advice}")
        return comparison
    collapse = collapse_note(predicted, gold, label_names) if predicted is not None and gold is not None else None
    f1_gap = baseline.get("macro_f1", 0.0) - model.get("macro_f1", 0.0)
    scores = (f"accuracy {model['accuracy']:.3f} vs {baseline['accuracy']:.3f}, macro-F1 {model['macro_f1']:.3f} "
              f"vs {baseline['macro_f1']:.3f}")
    if collapse is not None or f1_gap >= MACRO_F1_GAP:
        what = collapse or f"its macro-F1 is {f1_gap * 100:.0f} points under the baseline's"
        comparison.warnings.append(f"the {name} model's dev predictions collapse onto frequent classes: {what} "
                                   f"({scores} for the TF-IDF baseline); {advice}")
    elif model["accuracy"] < baseline["accuracy"]:
        noise = ""
        if comparison.paired is not None and comparison.paired["p_value"] >= NOISE_P:
            noise = f", within noise on this dev set (McNemar p = {comparison.paired['p_value']:.2g})"
        comparison.warnings.append(f"the {name} model loses to the TF-IDF baseline on dev ({scores}{noise}); "
                                   f"{advice}")
    return comparison


def collapse_note(predicted: Sequence[int], gold: Sequence[int], label_names: Sequence[str]) -> Optional[str]:
    """A description of the collapse when the top 1-2 predicted classes take >= 90% of the predictions while
    the same number of gold classes holds <= 75% of the labels; None otherwise."""
    if not len(predicted):
        return None
    top = 1 if len(label_names) <= 2 else 2
    predicted_top = Counter(int(p) for p in predicted).most_common(top)
    predicted_share = sum(count for _, count in predicted_top) / len(predicted)
    gold_share = sum(count for _, count in Counter(int(g) for g in gold).most_common(top)) / len(gold)
    if predicted_share < COLLAPSE_SHARE or gold_share > SPREAD_SHARE:
        return None
    names = ", ".join(label_names[i] if i < len(label_names) else str(i) for i, _ in predicted_top)
    used = len(predicted_top)
    return (f"{predicted_share:.0%} of them fall in {_classes(used)} ({names}), where the {_classes(top, 'top ')} "
            f"of the gold labels hold {gold_share:.0%}")


def _classes(count: int, prefix: str = "") -> str:
    return f"{prefix}{count} class" if count == 1 else f"{prefix}{count} classes"
