"""DistillConfig, the settings of `bertkit distill`, as a plain dataclass: no torch, so the command line builds its
flags from it (bertkit/cli/flags.py) without loading the job."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from bertkit.job_config import AT_LEAST_ONE, FRACTION, NON_NEGATIVE, POSITIVE, JobData, TrainConfig, check_ranges


@dataclass
class DistillConfig:
    teacher: str = ""                     # fine-tuned teacher folder (classification), or any encoder (embedding)
    student: Optional[str] = None         # student folder; else --student-layers copies teacher layers
    student_layers: Optional[int] = None
    task: Literal["classification", "embedding"] = "classification"
    output: str = ""
    temperature: float = 2.0
    alpha: float = 0.5                    # weight of the soft (teacher) loss; 1 - alpha on the gold labels
    logit_loss: Literal["kl", "mse"] = "kl"
    hidden_weight: float = 0.0            # intermediate-layer losses (TinyBERT / DistilBERT); 0 = off
    hidden_loss: Literal["mse", "cosine"] = "mse"
    attention_weight: float = 0.0
    augment_copies: int = 0               # masked copies of each training text, labeled by the teacher only
    augment_mask_prob: float = 0.1
    transfer: Optional[str] = None        # unlabeled texts (.txt lines, or .jsonl/.tsv/.csv text) the teacher labels
    pooling: Optional[str] = None         # embedding task: the sentence vector both models produce; None: the teacher's
    data: JobData = field(default_factory=lambda: JobData(max_length=128))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=3, lr=5e-5, warmup_ratio=0.1, seed=42,
                                                                        log_every=10))

    def __post_init__(self) -> None:
        """A temperature of 0 made every loss NaN (three roll-backs, then an error about the lr); a negative one, an
        alpha outside [0, 1] or a negative loss weight trained away from the teacher without a word."""
        check_ranges(self, {"temperature": POSITIVE, "alpha": FRACTION, "hidden_weight": NON_NEGATIVE,
                            "attention_weight": NON_NEGATIVE, "augment_copies": NON_NEGATIVE,
                            "student_layers": AT_LEAST_ONE})
