"""Does transformers load this folder as the model bertkit means? Two checks of the promise an HF folder makes.

`check_structure` re-implements transformers' loading rules from config.json alone (no transformers needed):
the class named in `architectures`, built from the config's sizes, has a set of weights with shapes; every one
must be in the file with that shape (tied decoder weights excepted, which transformers re-ties), and nothing
else may be (transformers reports extra weights as "unexpected" and drops them). Like transformers 5, it does
not apply `pruned_heads`. tests/checkpoints/test_hf_check.py holds it against transformers' own classes.

`compare_with_transformers` loads the folder with transformers and compares its hidden states and head
logits with a bertkit model on the same inputs.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import torch

from bertkit.checkpoints.json_files import read_json
from bertkit.errors import CheckpointError
from bertkit.model.pooling import pooled_or_cls

Shapes = dict[str, tuple[int, ...]]
WITH_POOLER = {"BertModel", "BertForPreTraining", "BertForNextSentencePrediction", "BertForSequenceClassification",
               "RobertaModel", "AlbertModel", "AlbertForPreTraining", "AlbertForSequenceClassification"}
TOLERANCE = 1e-4


def _num_labels(config: dict[str, Any]) -> int:
    """transformers' rule: id2label's size, else num_labels, else 2."""
    if isinstance(config.get("id2label"), dict) and config["id2label"]:
        return len(config["id2label"])
    return int(config.get("num_labels", 2))


def _linear(name: str, out: int, inp: int) -> Shapes:
    return {f"{name}.weight": (out, inp), f"{name}.bias": (out,)}


def _norm(name: str, size: int) -> Shapes:
    return {f"{name}.weight": (size,), f"{name}.bias": (size,)}


def expected_weights(config: dict[str, Any]) -> tuple[Shapes, Shapes]:
    """(required, optional) weight shapes of the transformers class config.json names; optional are the tied
    decoder weights transformers re-ties when they are absent."""
    architecture = (config.get("architectures") or [None])[0]
    model_type = config.get("model_type")
    if model_type == "gpt2":
        return _gpt2_weights(config), {"lm_head.weight": (config["vocab_size"], config["n_embd"])}
    if model_type not in ("bert", "roberta", "albert") or not architecture:
        raise CheckpointError(f"config.json names no transformers class (model_type {model_type!r}, architectures "
                              f"{config.get('architectures')!r})")
    V, H, L = config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]
    I, P, T = config["intermediate_size"], config["max_position_embeddings"], config.get("type_vocab_size", 2)
    E = config.get("embedding_size", 128) if model_type == "albert" else H
    base = "" if architecture.endswith("Model") else f"{model_type}."
    w: Shapes = {f"{base}embeddings.word_embeddings.weight": (V, E),
                 f"{base}embeddings.position_embeddings.weight": (P, E),
                 f"{base}embeddings.token_type_embeddings.weight": (T, E), **_norm(f"{base}embeddings.LayerNorm", E)}
    if model_type == "albert":
        w.update(_linear(f"{base}encoder.embedding_hidden_mapping_in", H, E))
        for g in range(config.get("num_hidden_groups", 1)):
            for j in range(config.get("inner_group_num", 1)):
                layer = f"{base}encoder.albert_layer_groups.{g}.albert_layers.{j}."
                for part in ("query", "key", "value", "dense"):
                    w.update(_linear(f"{layer}attention.{part}", H, H))
                w.update({**_norm(f"{layer}attention.LayerNorm", H), **_norm(f"{layer}full_layer_layer_norm", H),
                          **_linear(f"{layer}ffn", I, H), **_linear(f"{layer}ffn_output", H, I)})
        if architecture in WITH_POOLER:
            w.update(_linear(f"{base}pooler", H, H))
    else:
        for i in range(L):
            layer = f"{base}encoder.layer.{i}."
            for part in ("query", "key", "value"):
                w.update(_linear(f"{layer}attention.self.{part}", H, H))
            w.update({**_linear(f"{layer}attention.output.dense", H, H), **_norm(f"{layer}attention.output.LayerNorm", H),
                      **_linear(f"{layer}intermediate.dense", I, H), **_linear(f"{layer}output.dense", H, I),
                      **_norm(f"{layer}output.LayerNorm", H)})
        if architecture in WITH_POOLER:
            w.update(_linear(f"{base}pooler.dense", H, H))
    heads, optional = _head_weights(architecture, model_type, config, V, H, E)
    w.update(heads)
    return w, optional


def _head_weights(architecture: str, model_type: str, config: dict, V: int, H: int, E: int) -> tuple[Shapes, Shapes]:
    kind = architecture[len(model_type):].lower() if architecture.lower().startswith(model_type) else architecture
    optional: Shapes = {}
    w: Shapes = {}
    if kind in ("formaskedlm", "forpretraining"):
        if model_type == "roberta":
            w = {**_linear("lm_head.dense", H, H), **_norm("lm_head.layer_norm", H), "lm_head.bias": (V,)}
            optional = {"lm_head.decoder.weight": (V, H), "lm_head.decoder.bias": (V,)}
        else:
            head = "predictions" if model_type == "albert" else "cls.predictions"
            transform = "predictions" if model_type == "albert" else "cls.predictions.transform"
            w = {**_linear(f"{transform}.dense", E, H), **_norm(f"{transform}.LayerNorm", E), f"{head}.bias": (V,)}
            optional = {f"{head}.decoder.weight": (V, E), f"{head}.decoder.bias": (V,)}
    if kind in ("forpretraining", "fornextsentenceprediction"):
        if model_type == "albert":      # AlbertSOPHead is sized by num_labels (2 as written), BERT's NSP by 2
            w.update(_linear("sop_classifier.classifier", _num_labels(config), H))
        else:
            w.update(_linear("cls.seq_relationship", 2, H))
    if kind == "forsequenceclassification":
        if model_type == "roberta":
            w = {**_linear("classifier.dense", H, H), **_linear("classifier.out_proj", _num_labels(config), H)}
        else:
            w = _linear("classifier", _num_labels(config), H)
    if kind == "fortokenclassification":
        w = _linear("classifier", _num_labels(config), H)
    if kind == "forquestionanswering":
        w = _linear("qa_outputs", _num_labels(config), H)     # transformers sizes it by num_labels (2 as written)
    if not w and kind != "model":
        raise CheckpointError(f"config.json names {architecture}, which bertkit does not check")
    return w, optional


def _gpt2_weights(config: dict[str, Any]) -> Shapes:
    H, L, V = config["n_embd"], config["n_layer"], config["vocab_size"]
    inner = config.get("n_inner") or 4 * H
    w: Shapes = {"transformer.wte.weight": (V, H), "transformer.wpe.weight": (config.get("n_positions", 1024), H),
                 **_norm("transformer.ln_f", H)}
    for i in range(L):   # Conv1D: weights stored (in, out)
        h = f"transformer.h.{i}."
        w.update({**_norm(f"{h}ln_1", H), **_norm(f"{h}ln_2", H),
                  f"{h}attn.c_attn.weight": (H, 3 * H), f"{h}attn.c_attn.bias": (3 * H,),
                  f"{h}attn.c_proj.weight": (H, H), f"{h}attn.c_proj.bias": (H,),
                  f"{h}mlp.c_fc.weight": (H, inner), f"{h}mlp.c_fc.bias": (inner,),
                  f"{h}mlp.c_proj.weight": (inner, H), f"{h}mlp.c_proj.bias": (H,)})
    return w


def _file_shapes(folder: Path) -> Shapes:
    from safetensors import safe_open

    path = folder / "model.safetensors"
    if not path.is_file():
        raise CheckpointError(f"{folder}: no model.safetensors, the file transformers reads")
    with safe_open(str(path), framework="pt") as handle:
        return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}


def check_structure(folder: str | Path) -> str:
    """Raise CheckpointError naming what transformers would find missing, unexpected or of another shape;
    returns the class name when everything fits."""
    folder = Path(folder)
    config = read_json(folder / "config.json")
    required, optional = expected_weights(config)
    found = _file_shapes(folder)
    architecture = (config.get("architectures") or ["?"])[0]
    missing = sorted(set(required) - set(found))
    unexpected = sorted(set(found) - set(required) - set(optional))
    mismatched = sorted(f"{n} {found[n]} (expects {s})" for n, s in {**required, **optional}.items()
                        if n in found and found[n] != tuple(s))
    problems = [f"{label} {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}" for label, names in
                (("missing", missing), ("unexpected", unexpected), ("other shapes:", mismatched)) if names]
    if problems:
        raise CheckpointError(f"{folder}: transformers' {architecture} would not load these weights as they are: "
                              f"{'; '.join(problems)}")
    return architecture


# --- against transformers itself ---------------------------------------------------------------------------

def probe_inputs(vocab_size: int, type_vocab_size: int, pad_id: Optional[int], max_length: int):
    """Two rows of 12 (or fewer) ids, the second padded: fixed, avoiding the pad id (RoBERTa numbers positions
    from the non-pad tokens)."""
    T = max(2, min(12, max_length))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab_size, (2, T), generator=generator)
    if pad_id is not None:
        ids[ids == pad_id] = (pad_id + 1) % vocab_size
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, T - T // 3:] = 0
    if pad_id is not None:
        ids[1, T - T // 3:] = pad_id
    types = torch.zeros(2, T, dtype=torch.long)
    if type_vocab_size > 1:
        types[:, T // 2:] = 1
    return ids, mask, types


def bertkit_outputs(checkpoint, ids, mask, types, compute=None) -> dict[str, torch.Tensor]:
    """Hidden states and each head's logits of a bertkit checkpoint, in eval mode (dropout off; a model fresh
    from training is put back in the mode it was in). `compute(encoder, heads, ids, mask, types)`: another
    family's outputs (checkpoints/hf_check_family.py); the BERT family's by default."""
    encoder, heads = checkpoint.encoder, checkpoint.heads
    modules = [encoder, *heads.values()]
    modes = [module.training for module in modules]
    try:
        for module in modules:
            module.eval()
        return (compute or _outputs)(encoder, heads, ids, mask, types)
    finally:
        for module, mode in zip(modules, modes):
            module.train(mode)


def _outputs(encoder, heads, ids, mask, types) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = encoder(ids, mask, types)
        pooled = pooled_or_cls(out)
        result = {"hidden": out.last_hidden_state}
        for key, head in heads.items():
            if key == "mlm":
                result[key] = head(out.last_hidden_state, encoder.embeddings.token.weight)
            elif key in ("pair", "classifier"):
                result[key] = head(pooled)
            elif key == "qa":
                result[key] = torch.stack(head(out.last_hidden_state), dim=-1)
            else:
                result[key] = head(out.last_hidden_state)
    if not heads and out.pooled_output is not None:
        result["pooled"] = out.pooled_output
    return result


def transformers_outputs(model, architecture: str, ids, mask, types) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    result = {"hidden": out.hidden_states[-1]}
    if architecture.endswith("Model"):
        if getattr(out, "pooler_output", None) is not None:
            result["pooled"] = out.pooler_output
    elif architecture.endswith("ForPreTraining"):
        result["mlm"] = out.prediction_logits
        result["pair"] = out.sop_logits if hasattr(out, "sop_logits") else out.seq_relationship_logits
    elif architecture.endswith("ForQuestionAnswering"):
        result["qa"] = torch.stack([out.start_logits, out.end_logits], dim=-1)
    else:
        key = {"ForMaskedLM": "mlm", "ForNextSentencePrediction": "pair", "ForSequenceClassification": "classifier",
               "ForTokenClassification": "token_classifier"}
        result[next(v for k, v in key.items() if architecture.endswith(k))] = out.logits
    return result


def largest_difference(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], mask) -> tuple[str, float]:
    """(name, max |diff|) over the outputs both have, at the real (unpadded) positions."""
    if set(ours) != set(theirs):
        raise CheckpointError(f"bertkit computes {sorted(ours)} but transformers {sorted(theirs)}")
    real = mask.bool()
    worst = ("hidden", 0.0)
    for name in ours:
        a, b = ours[name].float(), theirs[name].float()
        diff = (a - b)[real] if a.dim() >= 2 and tuple(a.shape[:2]) == tuple(real.shape) else a - b
        value = float(diff.abs().max()) if diff.numel() else 0.0
        if not value <= worst[1]:    # NaN propagates as the worst
            worst = (name, value)
    return worst


def compare_with_transformers(folder: str | Path, reference, tolerance: float = TOLERANCE) -> tuple[str, float]:
    """Load `folder` with the transformers class its config.json names and compare with `reference` (a bertkit
    Checkpoint, or a CausalLM for a GPT-2 folder) on fixed inputs. Returns (class name, max |diff|); raises
    CheckpointError above `tolerance`."""
    import transformers

    folder = Path(folder)
    architecture = check_structure(folder)
    model_class = getattr(transformers, architecture)
    # in fp32 whatever the weights are stored in (a bf16 model's folder holds bf16 weights, which transformers
    # would otherwise compute in bf16): the check is whether the folder holds the model, not a precision's noise
    with _quiet(transformers):   # its load report and progress bar are not the user's business here
        model = model_class.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32).eval()
    rc = reference.config
    ids, mask, types = probe_inputs(rc.vocab_size, rc.type_vocab_size, rc.pad_token_id, rc.max_length)
    if architecture == "GPT2LMHeadModel":
        with torch.no_grad():
            ours = {"logits": reference(ids, attention_mask=mask).logits}
            theirs = {"logits": model(input_ids=ids, attention_mask=mask).logits}
    else:
        ours = bertkit_outputs(reference, ids, mask, types)
        theirs = transformers_outputs(model, architecture, ids, mask, types)
    name, worst = largest_difference(ours, theirs, mask)
    if not worst <= tolerance:
        raise CheckpointError(f"{folder}: transformers' {architecture} loads it but computes other outputs "
                              f"({name} differs by {worst:.3g} > {tolerance:g}); the folder does not hold this model")
    return architecture, worst


@contextmanager
def _quiet(transformers):
    logging = transformers.utils.logging
    verbosity, bar = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bar:
            logging.enable_progress_bar()
