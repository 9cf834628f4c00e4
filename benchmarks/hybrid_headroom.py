"""Issue 19: how much can pooling add over a fine-tuned model and TF-IDF? The hybrid's dev-fitted pooling against
the best pooling weight read off TEST (an upper bound for any log-linear pooling of the two parts; analysis only,
nothing ships it), and against a third part (a linear probe on the frozen base model's vectors) pooled the same way.

    bertkit finetune --task classification --model BASE --train T --dev D --output FT          # the default fine-tune
    bertkit finetune --task classification --model FT --train T --dev D --output HYB --method hybrid
    bertkit finetune --task classification --model BASE --train T --dev D --output PROBE --method linear-probe
    python benchmarks/hybrid_headroom.py --set chnsenticorp_like --runs FT=HYB [FT2=HYB2 ...] [--probe PROBE]

Every part's probabilities come from the saved folders (`bertkit.load`): the fine-tune's head, the hybrid's TF-IDF
part and its pooled output, the probe's. The two-part row refits the hybrid's pooling on dev with the library's own
`fit_dev_pooling` and must reproduce the folder's test accuracy (printed beside it as a check).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_description  # noqa: E402

import bertkit  # noqa: E402
from bertkit.data.readers import read_text_examples  # noqa: E402
from bertkit.finetune.linear.hybrid import POOL_SHARES, POOL_TEMPERATURES, log_loss, fit_dev_pooling  # noqa: E402
from bertkit.finetune.linear.model import log_probabilities  # noqa: E402

SPLITS = ("dev", "test")


def probabilities(folder: str, examples, names: list[str]) -> np.ndarray:
    """(N, K) class probabilities of a model folder, columns in `names` order."""
    rows = bertkit.load(folder).predict([e.text for e in examples])
    return np.array([[r["scores"][n] for n in names] for r in rows])


def accuracy(scores: np.ndarray, gold: np.ndarray) -> float:
    return float((scores.argmax(-1) == gold).mean())


def pool(parts: list[np.ndarray], shares: list[float]) -> np.ndarray:
    """Log-linear pooling: sum of share x log p over [TF-IDF, fine-tuned, (probe)]; the fine-tuned part gets the rest
    of the weight (1 - the others' shares), as the hybrid gives it."""
    rest = 1.0 - sum(shares)
    return sum(w * log_probabilities(p) for w, p in zip([shares[0], rest, *shares[1:]], parts))


def three_part(dev: list[np.ndarray], dev_y: np.ndarray) -> tuple[float, float]:
    """(w_tfidf, w_probe) of the grid triple (w_tfidf, w_probe, t) with the least dev log-loss of t x pool(...), on
    the library's grids (t scales confidence, not the argmax)."""
    grid = [(a, b, t) for a in POOL_SHARES for b in POOL_SHARES if a + b <= 1 + 1e-9 for t in POOL_TEMPERATURES]
    a, b, _ = min(grid, key=lambda g: log_loss(g[2] * pool(dev, [g[0], g[1]]), dev_y))
    return a, b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="chnsenticorp_like")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--runs", nargs="+", required=True, metavar="FINETUNED=HYBRID",
                        help="a fine-tuned folder and the `--method hybrid` folder built over it")
    parser.add_argument("--probe", help="a `--method linear-probe` folder over the base model (optional)")
    args = parser.parse_args()
    print(f"# {cpu_description()}", flush=True)
    examples = {s: read_text_examples(args.data_dir / f"{args.set}_{s}.jsonl.gz") for s in SPLITS}
    probe = None
    print("| run | TF-IDF | fine-tune | better of the two | hybrid (dev-fitted w; folder's) | gain | best w on test "
          "(upper bound) | gain | + frozen probe (dev-fitted w_tfidf / w_probe) | gain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    gains = {"hybrid": [], "oracle": [], "three": []}
    for run in args.runs:
        finetuned, hybrid_dir = run.split("=", 1)
        hybrid = bertkit.load(hybrid_dir)
        model = hybrid.linear.model
        names = model.label_names
        gold = {s: np.array([names.index(e.label) for e in examples[s]]) for s in SPLITS}
        tfidf = {s: model.parts[0].scores(examples[s]) for s in SPLITS}
        tuned = {s: probabilities(finetuned, examples[s], names) for s in SPLITS}
        saved = accuracy(hybrid.linear.scores(examples["test"]), gold["test"])
        if args.probe and probe is None:
            probe = {s: probabilities(args.probe, examples[s], names) for s in SPLITS}
        share = fit_dev_pooling([tfidf["dev"], tuned["dev"]], gold["dev"], len(names)).regularization
        two = [tfidf["test"], tuned["test"]]
        pooled = accuracy(pool(two, [share]), gold["test"])
        best = max((accuracy(pool(two, [w]), gold["test"]), w) for w in POOL_SHARES)
        alone = accuracy(tfidf["test"], gold["test"]), accuracy(tuned["test"], gold["test"])
        floor = max(alone)
        cells = [f"{alone[0]:.4f}", f"{alone[1]:.4f}", f"{floor:.4f}", f"{pooled:.4f} (w {share:g}; {saved:.4f})",
                 f"{100 * (pooled - floor):+.2f}", f"{best[0]:.4f} (w {best[1]:g})", f"{100 * (best[0] - floor):+.2f}"]
        gains["hybrid"].append(pooled - floor)
        gains["oracle"].append(best[0] - floor)
        if probe is not None:
            a, b = three_part([tfidf["dev"], tuned["dev"], probe["dev"]], gold["dev"])
            three = accuracy(pool([*two, probe["test"]], [a, b]), gold["test"])
            gains["three"].append(three - floor)
            cells += [f"{three:.4f} ({a:g} / {b:g})", f"{100 * (three - floor):+.2f}"]
        else:
            cells += ["", ""]
        print(f"| {Path(finetuned).name} | " + " | ".join(cells) + " |", flush=True)
    if probe is not None:
        print(f"# probe alone: test {accuracy(probe['test'], gold['test']):.4f}")
    for name, values in gains.items():
        if values:
            print(f"# mean gain over the better of the two, {name}: {100 * float(np.mean(values)):+.2f} points "
                  f"over {len(values)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
