"""The names of the choices that several layers and the command line accept: plain data, no torch, so that
`bertkit --help` lists them without loading a model (tests/cli/test_light_help.py)."""
from __future__ import annotations

# how token vectors become one sentence vector (model/pooling.py), and which layers it reads
POOLINGS: tuple[str, ...] = ("cls", "pooler", "mean", "max", "first-last-avg", "mean-sqrt-len", "weighted-mean",
                             "last-token", "none")
LAYER_STRATEGIES: tuple[str, ...] = ("last", "second-to-last", "first", "sum-all", "sum-last-4", "concat-last-4")
LAYERS_HELP = ("layer indices as in transformers' hidden_states: 4 = the 4th layer's output, "
               "0 = the embeddings, -1 = the last layer, -2 = the one before; a comma list (--layers=-2,-1) is the "
               "mean of those layers")


def parse_layers(value: str | int | list[int] | tuple[int, ...]) -> str:
    """A layer choice in its canonical form: a name of LAYER_STRATEGIES, or comma-separated layer indices
    ("-2,-1"; spaces dropped; an int or a list of ints too). ValueError, one line naming --layers, otherwise."""
    value = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value).strip()
    if value in LAYER_STRATEGIES:
        return value
    parts = [part.strip() for part in value.split(",")]
    try:
        indices = [int(part) for part in parts]
    except ValueError:
        raise ValueError(f"--layers {value!r} is not one of {', '.join(LAYER_STRATEGIES)} nor layer indices like "
                         "-1, -2,-1 or 4") from None
    if len(set(indices)) != len(indices):
        raise ValueError(f"--layers {value!r} names a layer twice")
    return ",".join(str(i) for i in indices)


def layer_indices(value: str, num_layers: int) -> list[int] | None:
    """Positions in hidden_states (embeddings + one per layer) of an index choice; None for a strategy name.
    ValueError naming --layers for an index outside this `num_layers`-layer model."""
    value = parse_layers(value)
    if value in LAYER_STRATEGIES:
        return None
    positions = []
    for index in (int(part) for part in value.split(",")):
        if not -num_layers <= index <= num_layers:
            raise ValueError(f"--layers {value}: layer {index} is out of range for this {num_layers}-layer model "
                             f"(use 0..{num_layers}, 0 = the embeddings, or -{num_layers}..-1)")
        positions.append(index if index >= 0 else num_layers + 1 + index)
    return positions

# inference precisions (runtime.py): what the weights are stored and computed in; "auto" resolves to another
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "int8")

# the names of finetune/tasks.py's TASKS, in its order (tests/finetune/test_task_registry.py holds them equal)
FINETUNE_TASKS: tuple[str, ...] = ("classification", "pair-classification", "multi-label", "regression", "ner", "qa",
                                   "prompt-classification", "seq2seq", "rerank", "simbert")
# `finetune --task`: every task but prompt classification, which `--template` chooses
TRAINABLE_TASKS: tuple[str, ...] = tuple(t for t in FINETUNE_TASKS if t != "prompt-classification")
# `evaluate / predict --task`: what a folder's bertkit.json records (a rerank folder is a pair-classification one)
SAVED_TASKS: tuple[str, ...] = tuple(t for t in FINETUNE_TASKS if t not in ("rerank", "simbert"))   # simbert: generate --similar


def repetition_problem(no_repeat_ngram_size, repetition_penalty, names: tuple[str, str] = (
        "no_repeat_ngram_size", "repetition_penalty")) -> str | None:
    """What is wrong with decoding's repetition settings (generate/repetition.py), as one line naming them by
    `names` (the fields, or the flags --no-repeat-ngram-size / --repetition-penalty); None when both are valid."""
    size_name, penalty_name = names
    size, penalty = no_repeat_ngram_size, repetition_penalty
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return f"{size_name} must be >= 0 (0 = off), an integer, got {size!r}"
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 0 < penalty < float("inf"):
        return (f"{penalty_name} must be a finite number > 0 (1.0 = off, > 1 discourages repeats), got "
                f"{penalty!r}")
    return None
