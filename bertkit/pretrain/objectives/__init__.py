"""Pre-training objectives, one module each (base.py says what an objective provides). OBJECTIVES is what
`bertkit pretrain --objective` offers: a new objective is one module plus one entry here. Entries name their
class ("module:Class") so that the command line lists them without importing torch."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from bertkit.errors import BertkitError

if TYPE_CHECKING:
    from bertkit.pretrain.config import PretrainConfig
    from bertkit.pretrain.objectives.base import Objective

OBJECTIVES: dict[str, str] = {
    "mlm": "bertkit.pretrain.objectives.mlm:MaskedLM",
    "mlm+nsp": "bertkit.pretrain.objectives.mlm:NextSentence",
    "mlm+sop": "bertkit.pretrain.objectives.mlm:SentenceOrder",
    "electra": "bertkit.pretrain.objectives.electra:Electra",
    "mlm+sbo": "bertkit.pretrain.objectives.sbo:SpanBoundary",
    "plm": "bertkit.pretrain.objectives.plm:PermutationLM",
}


def objective_for(config: "PretrainConfig") -> "Objective":
    """The objective config.data.objective names, made from the config."""
    name = config.data.objective
    if name not in OBJECTIVES:
        raise BertkitError(f"data.objective {name!r} is not a pre-training objective; choose one of "
                           f"{', '.join(OBJECTIVES)}")
    module, cls = OBJECTIVES[name].split(":")
    return getattr(importlib.import_module(module), cls)(config)


__all__ = ["OBJECTIVES", "objective_for"]
