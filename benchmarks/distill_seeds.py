"""Does distillation beat the same student without a teacher? Several seeds per variant on the BBC set.

    python benchmarks/distill_seeds.py --teacher DIR --work /tmp/distill-seeds [--seeds 42 1 2] \
        [--variants no-teacher kd kd-transfer gold-transfer kd-gold-transfer] [--student-epochs 6] \
        [--transfer-epochs 3]
    python benchmarks/distill_seeds.py --labeled 100 --work /tmp/distill-few [--seeds 42 1 2]

The student is 3 layers (0, 2, 4) of the pre-trained, not fine-tuned all-MiniLM-L6-v2 with a new head
(DistilBERT's set-up), so the only task knowledge it can get is from the labels and, when distilled, from
the teacher: --teacher DIR (a MiniLM fine-tuned on bbc_train, e.g. `benchmarks/compress.py`'s `teacher`
folder), or, without it, a MiniLM this script fine-tunes on the labeled set.
With --labeled N only N training articles (N / 5 per topic, drawn with seed 0) keep their labels, as when a
user has labeled a few hundred of their own texts; the other training articles are the unlabeled transfer set.
Otherwise the transfer set is the rest of each training article (the model reads only its first max_length
tokens), cut into windows of --window-words words, at most --windows per article.
Variants, each trained once per seed and scored on bbc_test:
- no-teacher: gold labels only (alpha 0);
- kd: KD with T=2, alpha=0.5 on the labeled texts;
- kd-transfer: kd plus the transfer set, which only the teacher labels;
- gold-transfer: a control, no teacher, the windows with their article's gold label: how much of any gain
  is the extra text rather than the teacher (not with --labeled);
- kd-gold-transfer: kd on that same gold-labeled set: does the teacher still help when the student gets all
  that labeled text too?
Only bbc_train texts are ever used for training; dev picks the best epoch, test is scored once per run.
Mean over seeds is reported.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import time
from pathlib import Path

from bertkit.job_config import job_config
from bertkit.api import minilm_path
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.distill.job import DistillConfig, run_distill
from bertkit.distill.measure import folder_task_options, load_dev_set, measure_module
from bertkit.distill.student import student_from_teacher
from bertkit.finetune.job import FinetuneConfig, run_finetune
from bertkit.finetune.model import model_from_checkpoint

VARIANTS = ("no-teacher", "kd", "kd-transfer", "gold-transfer", "kd-gold-transfer")


def article_windows(train_path: str, unlabeled_path: Path, labeled_path: Path, window_words: int,
                    per_article: int) -> int:
    """Windows of each article after its first `window_words` words (what the model already reads), written
    twice: as text only (the transfer set) and with the article's label (the gold-transfer controls)."""
    count = 0
    with gzip.open(train_path, "rt", encoding="utf-8") as source, unlabeled_path.open("w", encoding="utf-8") as \
            unlabeled, labeled_path.open("w", encoding="utf-8") as labeled:
        for line in source:
            row = json.loads(line)
            words = row["text"].split()
            for start in list(range(window_words, len(words), window_words))[:per_article]:
                window = " ".join(words[start:start + window_words])
                if len(window.split()) < window_words // 4:
                    continue
                unlabeled.write(json.dumps({"text": window}, ensure_ascii=False) + "\n")
                labeled.write(json.dumps({"text": window, "label": row["label"]}, ensure_ascii=False) + "\n")
                count += 1
    return count


def split_labeled(train_path: str, count: int, labeled_path: Path, unlabeled_path: Path) -> None:
    """count / 5 articles per topic keep their labels (seed 0); the rest are written as text only."""
    with gzip.open(train_path, "rt", encoding="utf-8") as source:
        rows = [json.loads(line) for line in source]
    order = list(range(len(rows)))
    random.Random(0).shuffle(order)
    topics = sorted({row["label"] for row in rows})
    per_topic, kept = count // len(topics), set()
    for topic in topics:
        kept.update([i for i in order if rows[i]["label"] == topic][:per_topic])
    with labeled_path.open("w", encoding="utf-8") as labeled, unlabeled_path.open("w", encoding="utf-8") as rest:
        for i, row in enumerate(rows):
            if i in kept:
                labeled.write(json.dumps(row, ensure_ascii=False) + "\n")
            else:
                rest.write(json.dumps({"text": row["text"]}, ensure_ascii=False) + "\n")


def score_on_test(folder: Path, test_path: str, max_length: int) -> float:
    checkpoint = load_checkpoint(folder)
    net = model_from_checkpoint(checkpoint, "classification", checkpoint.meta.get("labels"))
    test = load_dev_set(checkpoint.tokenizer, net.label_names, test_path, folder_task_options(checkpoint, max_length))
    return measure_module(folder.name, net, test).accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", help="a MiniLM fine-tuned on the labeled set (default: fine-tune one here)")
    parser.add_argument("--labeled", type=int, help="keep the labels of only this many training articles")
    parser.add_argument("--teacher-epochs", type=int, default=3)
    parser.add_argument("--data-dir", default="/work/shared/data")
    parser.add_argument("--work", default="/tmp/distill-seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS[:3]))
    parser.add_argument("--student-epochs", type=int, default=6, help="epochs without a transfer set")
    parser.add_argument("--transfer-epochs", type=int, default=3, help="epochs with one (each is several times longer)")
    parser.add_argument("--window-words", type=int, default=90)
    parser.add_argument("--windows", type=int, default=3, help="at most this many windows per article")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--json")
    args = parser.parse_args()
    data, work = Path(args.data_dir), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    train, dev, test = (str(data / f"bbc_{s}.jsonl.gz") for s in ("train", "dev", "test"))

    student = work / "student-init"
    if not (student / "config.json").exists():
        pretrained = load_checkpoint(minilm_path())
        save_checkpoint(student, student_from_teacher(pretrained.encoder, 3), pretrained.tokenizer)
    unlabeled, labeled = work / "transfer.jsonl", work / "transfer-gold.jsonl"
    if args.labeled:
        if any(v.endswith("gold-transfer") for v in args.variants):
            raise SystemExit("--labeled: the gold-transfer controls need the windows set-up (drop --labeled)")
        train = str(work / "labeled.jsonl")
        split_labeled(str(data / "bbc_train.jsonl.gz"), args.labeled, Path(train), unlabeled)
        described = f"{args.labeled} labeled articles; transfer set: the other training articles, unlabeled"
    else:
        windows = article_windows(train, unlabeled, labeled, args.window_words, args.windows)
        merged = work / "train+windows.jsonl"        # gold windows: plain training data for the controls
        with merged.open("w", encoding="utf-8") as out, gzip.open(train, "rt", encoding="utf-8") as gold:
            out.write(gold.read())
            out.write(labeled.read_text(encoding="utf-8"))
        described = f"all training articles labeled; transfer set: {windows} windows of their unread text"
    teacher = args.teacher or str(work / "teacher")
    if not args.teacher and not (work / "teacher" / "config.json").exists():
        run_finetune(job_config(FinetuneConfig, task="classification", model=str(minilm_path()), train=train, dev=dev,
                                    output=teacher, lr=1e-4, epochs=args.teacher_epochs, max_length=args.max_length,
                                    batch_size=args.batch_size, progress_bar=False))
    teacher_accuracy = score_on_test(Path(teacher), test, args.max_length)
    print(f"teacher {teacher}: test accuracy {100 * teacher_accuracy:.2f}; {described}", flush=True)

    results: dict[str, list[float]] = {}
    for seed in args.seeds:
        for variant in args.variants:
            distilled = variant.startswith("kd")
            extra = variant.endswith("transfer")
            output = work / f"{variant}-seed{seed}"
            started = time.perf_counter()
            if variant.endswith("gold-transfer"):
                train_file, transfer = str(merged), None
            else:
                train_file, transfer = train, (str(unlabeled) if extra else None)
            run_distill(job_config(DistillConfig, 
                teacher=teacher, student=str(student), train=train_file, dev=dev, output=str(output),
                alpha=0.5 if distilled else 0.0, temperature=2.0, lr=1e-4, transfer=transfer, seed=seed,
                epochs=args.transfer_epochs if extra else args.student_epochs, max_length=args.max_length,
                batch_size=args.batch_size, progress_bar=False))
            accuracy = score_on_test(output, test, args.max_length)
            results.setdefault(variant, []).append(accuracy)
            print(f"seed {seed} {variant}: test accuracy {100 * accuracy:.2f} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)

    print(f"\nBBC test, 3-layer student from pre-trained MiniLM layers 0/2/4; {described}; teacher "
          f"{100 * teacher_accuracy:.2f}; seeds {' '.join(map(str, args.seeds))}")
    print("| variant | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean | % of teacher |")
    print("|---|" + "---:|" * (len(args.seeds) + 2))
    for variant, scores in results.items():
        mean = statistics.mean(scores)
        print(f"| {variant} | " + " | ".join(f"{100 * a:.2f}" for a in scores) +
              f" | **{100 * mean:.2f}** | {100 * mean / teacher_accuracy:.1f} |")
    if args.json:
        report = {"teacher": teacher_accuracy, "setting": described, "results": results, "args": vars(args)}
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
