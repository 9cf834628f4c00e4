"""A fine-tuned model folder, loaded for inference: its encoder with the saved head, and the task object that
encodes inputs exactly as training did (task options, label names from bertkit.json).

Used by predict / evaluate (bertkit.finetune.predict) and by the hybrid over a fine-tuned model, whose
predictions read that model's logits (bertkit.finetune.linear).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bertkit.checkpoints import load_checkpoint
from bertkit.errors import CheckpointError
from bertkit.finetune.model import model_from_checkpoint
from bertkit.finetune.tasks import HEAD_TASKS, SAVED_TASKS, TASKS, TaskOptions, build_task
from bertkit.runtime import pick_device


def checkpoint_of(model: Any):
    """Accept a folder path, a loaded Checkpoint, or the API's Model (which wraps one)."""
    if isinstance(model, (str, Path)):
        return load_checkpoint(model)
    return getattr(model, "checkpoint", model)


# tasks whose jobs save a model of their own (prompt classification, seq2seq, simbert): their job modules load it
OWN_MODEL_TASKS = tuple(name for name in SAVED_TASKS if TASKS[name].build is None)


def device_of(checkpoint) -> Optional[str]:
    """Where a loaded checkpoint's encoder is (None: it has no parameters)."""
    parameter = next(checkpoint.encoder.parameters(), None)
    return str(parameter.device) if parameter is not None else None


def finetuned_model(model: Any, task: Optional[str] = None, device: Optional[str] = None):
    """(FinetuneModel, task object) for a fine-tuned folder; `task` (e.g. from --task) must match its head.
    device: where to run it; None: a folder path runs on the GPU when there is one, a model already loaded
    (`bertkit.load(dir, device=...)`) stays where it was loaded."""
    checkpoint = checkpoint_of(model)
    if device is None and not isinstance(model, (str, Path)):
        device = device_of(checkpoint)
    saved_task = (checkpoint.meta or {}).get("task")
    where = getattr(checkpoint, "path", None) or "the model"
    if saved_task in OWN_MODEL_TASKS:
        raise CheckpointError(f"{where} is a {saved_task} model (bertkit.generate); use bertkit.load(folder)"
                              ".predict, bertkit predict / evaluate, or bertkit generate --source (seq2seq)")
    if saved_task not in HEAD_TASKS:
        found = f"task {saved_task!r}" if saved_task else "no task"
        raise CheckpointError(f"{where} is not a fine-tuned model (bertkit.json has {found}); run bertkit "
                              f"finetune first (tasks: {', '.join(SAVED_TASKS)})")
    if task is not None and task != saved_task:
        raise CheckpointError(f"{where} was fine-tuned for {saved_task!r}, not {task!r}")
    net = model_from_checkpoint(checkpoint, saved_task, None)
    names = (checkpoint.meta or {}).get("labels") or []
    if TASKS[saved_task].labels not in ("score", "none") and len(names) != getattr(net.head, "num_labels", len(names)):
        raise CheckpointError(f"{where}: bertkit.json lists {len(names)} labels but the head has "
                              f"{net.head.num_labels} outputs; the folder was edited or mixed up")
    options = TaskOptions.saved(checkpoint.meta, Path(where) / "bertkit.json" if where != "the model" else where)
    net.to(pick_device(device)).eval()
    return net, build_task(saved_task, checkpoint.tokenizer, net.label_names, options)
