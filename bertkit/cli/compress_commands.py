"""`bertkit export-onnx`, `bertkit quantize`, `bertkit prune-heads`, `bertkit distill`: thin shells over
bertkit.distill. Each command that changes a model measures what it changed and prints it."""
from __future__ import annotations

import argparse
import json
import sys

from bertkit.job_config import FIT_SET, flat_keys, short_flags
from bertkit.cli.flags import add_config_flags, config_from_args, skip_progress_bar_field
from bertkit.distill.config import DistillConfig
from bertkit.errors import BertkitError
from bertkit.options import POOLINGS

_DISTILL_HELP = {"teacher": "fine-tuned teacher folder (classification), or any encoder (embedding)",
                 "student": "student model folder (same vocabulary)",
                 "student_layers": "copy every k-th teacher layer, ending at its top one, into an N-layer student",
                 "augment_copies": "masked copies of each training text that only the teacher labels (transfer-set "
                                   "augmentation); --augment-mask-prob per token",
                 "transfer": "unlabeled in-domain texts (.txt, one per line, or .jsonl/.tsv/.csv with a text column) "
                             "that the teacher labels for the student; their labels, if any, are ignored",
                 "pooling": "embedding task: the sentence vector both models produce; none: the teacher folder's "
                            "pooling",
                 "save_every": "save the training state every N steps (for --resume); 0: only at the end",
                 "resume": "continue the interrupted run in --output from its last saved state"}


def register(subparsers) -> None:
    p = subparsers.add_parser("export-onnx", help="export a model folder to ONNX (pooling inside the graph)",
                              description="Write an ONNX graph: input_ids, attention_mask (dynamic batch and "
                                          "length) -> sentence vectors, plus logits for classifiers. The export is "
                                          "compared with PyTorch at several shapes; the max abs diff is printed.")
    p.add_argument("--model", required=True, help="model folder")
    p.add_argument("--output", required=True, help="the .onnx file; the tokenizer is written beside it")
    p.add_argument("--pooling", default=None, choices=POOLINGS[:-1], help="default: the model folder's")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="L2-normalize the vectors inside the graph, or not (--no-normalize) (default: as the model "
                        "folder says)")
    p.add_argument("--opset", type=int, default=17)
    p.set_defaults(func=_export_onnx)

    p = subparsers.add_parser("quantize", help="int8 weights, measured against the fp32 model before saving",
                              description="Write an int8 folder (per-channel int8 weights and scales, ~27%% of the "
                                          "fp32 size) after a quality gate on your data: accuracy on --dev "
                                          "(classifiers: at most 0.5 points lower), or the cosine of sentence "
                                          "vectors on --texts (mean >= 0.99, min >= 0.95; default sample: 400 "
                                          "built-in English sentences). When the gate fails, the most sensitive "
                                          "Linear layers stay in higher precision; past --max-kept-layers nothing "
                                          "is written and the command exits with code 2. Prints the table.")
    p.add_argument("--model", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--dev", help="labelled file (classification): the accuracy gate")
    p.add_argument("--texts", help=".txt (one text per line) or .jsonl (field text): the cosine gate")
    p.add_argument("--max-texts", type=int, default=500, help="texts sampled from --texts (default %(default)s)")
    p.add_argument("--max-length", type=int, default=None,
                   help="tokens per --dev example (default: the folder's, as its evaluate and predict cut texts)")
    p.add_argument("--max-dev-examples", type=int)
    p.add_argument("--max-kept-layers", type=int, default=None,
                   help="Linear layers the gate may keep in higher precision (default: a quarter of them; 0: "
                        "refuse instead)")
    p.add_argument("--max-accuracy-drop", type=float, default=0.5, help="points (default %(default)s)")
    p.add_argument("--min-mean-cosine", type=float, default=0.99, help="default %(default)s")
    p.add_argument("--min-cosine", type=float, default=0.95, help="default %(default)s")
    p.set_defaults(func=_quantize)

    p = subparsers.add_parser("prune-heads", help="remove the least important attention heads (Michel et al.)",
                              description="Score heads by |d loss / d head gate| on labelled data, remove a "
                                          "fraction (or a count per layer), save, reload, and report accuracy and "
                                          "speed before and after. Two folders come out: OUTPUT keeps the physically "
                                          "smaller layers (the speed-up; bertkit.load reads it, transformers 5 does "
                                          "not, as it ignores config.json pruned_heads), and OUTPUT/transformers/ "
                                          "holds full shapes with the pruned heads zeroed, which plain "
                                          "from_pretrained loads with the same outputs and no speed-up.")
    p.add_argument("--model", required=True, help="a fine-tuned classification folder")
    p.add_argument("--output", required=True, help="bertkit's pruned folder; its transformers/ subfolder is the "
                                                   "full-shape copy for transformers")
    p.add_argument("--dev", required=True, help="labelled file for the before/after accuracy")
    p.add_argument("--importance-data", help="labelled file to score heads on (default: --dev)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--fraction", type=float, help="fraction of all heads to remove, e.g. 0.3")
    group.add_argument("--per-layer", type=int, help="heads to remove in every layer")
    p.add_argument("--max-length", type=int, default=None,
                   help="tokens per example (default: the folder's, as its evaluate and predict cut texts)")
    p.add_argument("--max-dev-examples", type=int)
    p.set_defaults(func=_prune)

    p = subparsers.add_parser("distill", help="train a smaller student from a fine-tuned teacher",
                              description="Knowledge distillation on the shared training loop: logits (KD with "
                                          "temperature, or MSE), optional hidden-state and attention losses; or "
                                          "--task embedding to mimic the teacher's sentence vectors.")
    add_config_flags(p, DistillConfig, skip=skip_progress_bar_field(p) | FIT_SET, aliases=short_flags(DistillConfig),
                     help={flat_keys(DistillConfig).get(name, name): text for name, text in _DISTILL_HELP.items()},
                     metavars={"teacher": "DIR", "student": "DIR", "output": "DIR", "data.train": "FILE",
                               "data.dev": "FILE",
                               "transfer": "FILE"})
    p.set_defaults(func=_distill, accepts_overrides=True)


def _export_onnx(args) -> int:
    from bertkit.distill.onnx_export import export_onnx
    result = export_onnx(args.model, args.output, args.pooling, args.normalize, args.opset)
    print(json.dumps({"output": str(result.path), "outputs": list(result.outputs), "size_bytes": result.size_bytes,
                      "max_abs_diff_vs_pytorch": result.max_abs_diff}, indent=2))
    return 0


def _quantize(args) -> int:
    from bertkit.distill.quantize import QuantizeConfig, run_quantize
    from bertkit.distill.quantize_gate import GateLimits

    if args.max_texts < 1 or (args.max_kept_layers is not None and args.max_kept_layers < 0):
        raise BertkitError("--max-texts must be >= 1 and --max-kept-layers >= 0")
    limits = GateLimits(args.max_accuracy_drop, args.min_mean_cosine, args.min_cosine)
    report = run_quantize(QuantizeConfig(args.model, args.output, args.dev, args.texts, args.max_texts,
                                         args.max_length, args.max_dev_examples, args.max_kept_layers, limits))
    print("\n".join(report.lines()))
    if not report.passed:
        raise BertkitError(f"int8 fails the gate even with {len(report.kept)} Linear layers kept in higher precision "
                           f"(see the table); nothing written to {args.output}")
    print(f"bertkit: wrote {report.output} (int8; bertkit.load runs it, transformers cannot: `bertkit convert` "
          "writes its dequantized fp32 form for transformers)", file=sys.stderr)
    return 0


def _prune(args) -> int:
    from bertkit.distill.prune_job import prune_and_measure
    report = prune_and_measure(args.model, args.output, args.dev, args.importance_data, args.fraction,
                               args.per_layer, args.max_length, args.max_dev_examples)
    print("\n".join(report.lines()))
    return 0


def _distill(args) -> int:
    from bertkit.distill.job import run_distill
    print(json.dumps(run_distill(config_from_args(DistillConfig, args)), indent=2))
    return 0
