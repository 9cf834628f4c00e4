"""The quickstart's result table (printed and saved as table.txt) and results.json."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from bertkit.atomic_write import write_json
from bertkit.progress import clock


class FinetuneRow(NamedTuple):
    name: str                    # what the model started from
    folder: Path                 # the fine-tuned model folder
    max_length: Optional[int]    # None: all of each text (the TF-IDF baseline)
    train_examples: int
    epochs: Optional[int]        # None: not trained in epochs (the TF-IDF baseline)
    steps: int
    train_seconds: float         # optimizer steps only, as the training loop counts them
    wall_seconds: float          # the whole stage: reading, tokenizing, training, dev and test evaluation
    test: dict                   # accuracy, macro_f1, mcc on the test split


def format_table(rows: Sequence[FinetuneRow], test_size: int, num_labels: int) -> str:
    header = ("start from", "tokens", "train texts", "epochs", "train time", "test accuracy", "macro-F1")
    body = [(r.name, "all" if r.max_length is None else str(r.max_length), f"{r.train_examples:,}",
             "-" if r.epochs is None else str(r.epochs), clock(r.train_seconds),
             f"{r.test['accuracy']:.3f}", f"{r.test['macro_f1']:.3f}") for r in rows]
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]

    def line(cells) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "-" * len(line(header))
    title = f"BBC News test split: {test_size:,} articles, {num_labels} topics (chance {1 / num_labels:.3f})"
    return "\n".join([title, rule, line(header), rule, *(line(b) for b in body), rule])


def write_results(folder: Path, table: str, rows: Sequence[FinetuneRow], stages: dict[str, float],
                  pretraining: dict, data: dict, total_seconds: float, estimate_seconds: Optional[float]) -> None:
    (folder / "table.txt").write_text(table + "\n", encoding="utf-8")
    record = {
        "data": data,
        "pretraining": pretraining,
        "finetuning": [{**r._asdict(), "folder": str(r.folder)} for r in rows],
        "stage_seconds": stages,
        "total_seconds": total_seconds,
        "estimated_seconds": estimate_seconds,
    }
    write_json(folder / "results.json", record)
