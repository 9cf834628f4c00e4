"""The score of the model already in a fine-tuning output folder, so that no later run replaces it with a worse one.

metrics.json beside the model records the metric that picked it, its dev metrics and what it was measured
on (`dev_data`: the task, a SHA-256 of the dev file and how many examples were used). A new or resumed run
into the same folder with the same metric and dev data must beat that score before it saves; a run
measured another way (another dev file, metric or task) cannot be compared and replaces the model as asked.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Optional

METRICS_FILE = "metrics.json"


def hash_file(digest, path: str | Path) -> None:
    """Feed a file's bytes to a hashlib digest, 1 MiB at a time (the one file-hashing loop)."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)


def dev_fingerprint(task: str, dev_path: str | Path, examples: int) -> dict:
    digest = hashlib.sha256()
    hash_file(digest, dev_path)
    return {"task": task, "sha256": digest.hexdigest(), "examples": examples}


def read_saved_metrics(output: Path) -> Optional[dict]:
    """metrics.json of the model in `output`, when there is a model and the file is a JSON object."""
    path = Path(output) / METRICS_FILE
    if not (Path(output) / "model.safetensors").is_file() or not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return saved if isinstance(saved, dict) else None


def saved_score(output: Path, metric: str, dev_data: Optional[dict]) -> Optional[float]:
    """The saved model's `metric` if it was measured on the same dev data, else None (nothing to beat)."""
    saved = read_saved_metrics(output)
    if saved is None or dev_data is None or saved.get("metric_for_best") != metric or saved.get("dev_data") != dev_data:
        return None
    value = saved.get("dev", {}).get(metric) if isinstance(saved.get("dev"), dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
