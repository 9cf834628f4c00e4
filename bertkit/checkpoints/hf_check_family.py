"""Does transformers load an ELECTRA or XLNet folder as the model bertkit means? The output half of hf_check.py
for the families with their own modules (checkpoints/electra.py, checkpoints/xlnet.py).

The folder is loaded with the transformers class its config.json names; every weight that class expects must be
in the file with its shape and nothing else may be (transformers' loading report), and on fixed probe inputs its
last hidden state and head logits must match bertkit's within the tolerance. XLNet is probed the way
transformers feeds it: padding on the left, so its sequence summary (the last token) is a real token.
"""
from __future__ import annotations

from pathlib import Path

import torch

from bertkit.checkpoints.hf_check import TOLERANCE, _quiet, bertkit_outputs, largest_difference, probe_inputs
from bertkit.checkpoints.json_files import read_json
from bertkit.errors import CheckpointError

# transformers' output field -> bertkit head key, per class (the base model has the hidden state only)
HEAD_OUTPUTS = {"ElectraForPreTraining": "discriminator", "ElectraForMaskedLM": "mlm",
                "ElectraForSequenceClassification": "classifier", "ElectraForTokenClassification": "token_classifier",
                "ElectraForQuestionAnswering": "qa", "XLNetLMHeadModel": "lm",
                "XLNetForSequenceClassification": "classifier", "XLNetForTokenClassification": "token_classifier"}


def family_outputs(encoder, heads, ids, mask, types) -> dict[str, torch.Tensor]:
    """bertkit's last hidden state and each head's logits, as its ELECTRA / XLNet prediction paths compute them."""
    with torch.no_grad():
        hidden = encoder(ids, mask, types).last_hidden_state                     # (B, T, C)
        result = {"hidden": hidden}
        for key, head in heads.items():
            if key in ("mlm", "lm"):
                result[key] = head(hidden, encoder.embeddings.token.weight)      # (B, T, V)
            elif key == "classifier":
                if hasattr(encoder, "summary_index"):                            # XLNet: the last real token
                    at = encoder.summary_index(mask, *ids.shape, ids.device)
                    result[key] = head(hidden[torch.arange(len(ids)), at])
                else:                                                            # ELECTRA: [CLS]
                    result[key] = head(hidden[:, 0])
            elif key == "qa":
                result[key] = torch.stack(head(hidden), dim=-1)                  # (B, T, 2)
            else:
                result[key] = head(hidden)                                       # (B, T) or (B, T, L)
    return result


def transformers_family_outputs(model, architecture: str, ids, mask, types) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    result = {"hidden": out.hidden_states[-1]}
    key = HEAD_OUTPUTS.get(architecture)
    if key == "qa":
        result[key] = torch.stack([out.start_logits, out.end_logits], dim=-1)
    elif key is not None:
        result[key] = out.logits
    return result


def compare_family_with_transformers(folder: str | Path, checkpoint, tolerance: float = TOLERANCE) -> tuple[str, float]:
    """Load `folder` (an ELECTRA or XLNet folder) with the transformers class its config.json names and compare
    with `checkpoint` on fixed inputs. Returns (class name, max |diff|); raises CheckpointError when transformers
    would leave a weight random or drop one, or above `tolerance`."""
    import transformers

    folder = Path(folder)
    architecture = (read_json(folder / "config.json").get("architectures") or [""])[0]
    if architecture not in HEAD_OUTPUTS and architecture not in ("ElectraModel", "XLNetModel"):
        raise CheckpointError(f"{folder}: config.json names {architecture!r}, which bertkit does not check")
    with _quiet(transformers):
        model, info = getattr(transformers, architecture).from_pretrained(
            str(folder), attn_implementation="eager", dtype=torch.float32, output_loading_info=True)
    problems = [f"{label} {', '.join(sorted(map(str, info.get(field) or []))[:4])}" for label, field in
                (("missing", "missing_keys"), ("unexpected", "unexpected_keys"), ("other shapes:", "mismatched_keys"))
                if info.get(field)]
    if problems:
        raise CheckpointError(f"{folder}: transformers' {architecture} would not load these weights as they are: "
                              f"{'; '.join(problems)}")
    config = checkpoint.config
    ids, mask, types = probe_inputs(config.vocab_size, getattr(config, "type_vocab_size", 2), config.pad_token_id,
                                    config.max_length)
    if config.family == "xlnet":       # left padding, as transformers' XLNet tokenizer pads
        ids, mask, types = ids.flip(1), mask.flip(1), types.flip(1)
    ours = bertkit_outputs(checkpoint, ids, mask, types, compute=family_outputs)
    theirs = transformers_family_outputs(model.eval(), architecture, ids, mask, types)
    name, worst = largest_difference(ours, theirs, mask)
    if not worst <= tolerance:
        raise CheckpointError(f"{folder}: transformers' {architecture} loads it but computes other outputs "
                              f"({name} differs by {worst:.3g} > {tolerance:g}); the folder does not hold this model")
    return architecture, worst
