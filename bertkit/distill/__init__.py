"""Compression and export: knowledge distillation, int8 quantization with a quality gate, head pruning, ONNX export.

Each command measures what it changed (accuracy and sentences/s before and after) and prints it.
Submodules are imported on first use, so the checkpoint loader can import bertkit.distill.prune cheaply
(and without an import cycle through the training code).
"""
from bertkit.lazy import lazy_exports

_EXPORTS = {"DistillConfig": "config", "run_distill": "job", "export_onnx": "onnx_export", "OnnxModel": "onnx_model",
            "head_importance": "prune", "heads_to_prune": "prune", "prune_heads": "prune",
            "QuantizeConfig": "quantize", "run_quantize": "quantize"}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
