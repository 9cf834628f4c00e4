"""The fine-tuned model's logits, for the hybrid over a fine-tuned model (hybrid.py's pooling fitted on dev).

`bertkit finetune --method hybrid --model DIR`: when DIR was fine-tuned for the same task (classification or
pair-classification) over the same labels, the hybrid reads DIR's classification head (its logits, computed
exactly as `bertkit predict` computes them: the saved task options, head+tail truncation and all) instead of the
frozen encoder's sentence vectors.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bertkit.checkpoints import Checkpoint
from bertkit.data.readers import TextExample
from bertkit.finetune.inference import forward_features, stack
from bertkit.finetune.loaded import finetuned_model
from bertkit.train.loop import say

LOGIT_TASKS = ("classification", "pair-classification")


class FinetunedHead:
    """A fine-tuned folder's encoder + classification head and the task object that encodes its inputs."""

    def __init__(self, checkpoint: Checkpoint):
        self.net, self.task = finetuned_model(checkpoint)

    @property
    def label_names(self) -> list[str]:
        return list(self.net.label_names)

    def logits(self, examples: Sequence[TextExample], batch_size: int = 64) -> np.ndarray:
        """(N, K) logits in the head's label order."""
        if not examples:
            return np.zeros((0, len(self.label_names)))
        features = self.task.encode(examples, quiet=True)
        return stack(forward_features(self.net, features, self.task.tokenizer.pad_id, batch_size)).astype(np.float64)


def finetuned_head_for(checkpoint: Checkpoint, task: str, label_names: Sequence[str]) -> Optional[FinetunedHead]:
    """The folder's head when it was fine-tuned for `task` over the same label set, else None (the hybrid then
    stacks the frozen encoder's vectors)."""
    meta = checkpoint.meta or {}
    if task not in LOGIT_TASKS or meta.get("task") != task or "linear" in meta:
        return None
    saved = meta.get("labels") or []
    if sorted(saved) != sorted(label_names):
        say(f"{checkpoint.path} was fine-tuned over other labels ({len(saved)}, the training file has "
            f"{len(label_names)}): the hybrid reads its frozen vectors, not its classification head")
        return None
    return FinetunedHead(checkpoint)
