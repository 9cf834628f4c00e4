"""`bertkit convert`: the folder it keeps loads in the transformers class it names with bertkit's outputs
(checked inside convert, and again here from the outside); models no transformers class computes are refused
with the reason, exit code 2, and nothing written."""
import json

import pytest
import torch

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.conversion import convert
from bertkit.distill.prune import prune_heads
from bertkit.errors import BertkitError, CheckpointError
from bertkit.model import Encoder, EncoderConfig
from bertkit.model.heads import MaskedLMHead, SentencePairHead, SequenceClassificationHead

transformers = pytest.importorskip("transformers")


def config(**changes):
    base = dict(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                max_position_embeddings=40)
    return EncoderConfig(**{**base, **changes})


def write(folder, cfg, heads=(), prune=None):
    torch.manual_seed(0)
    encoder = Encoder(cfg).eval()
    build = {"mlm": MaskedLMHead, "pair": SentencePairHead, "classifier": lambda c: SequenceClassificationHead(c, 3)}
    modules = {key: build[key](cfg).eval() for key in heads}
    for module in modules.values():
        for parameter in module.parameters():
            torch.nn.init.normal_(parameter, std=0.5)
    if prune:
        prune_heads(encoder, prune)
    extra = {"pruned_heads": {str(k): v for k, v in prune.items()}} if prune else None
    save_checkpoint(folder, encoder, None, modules, {"task": "classification"} if "classifier" in heads else None,
                    extra)
    return folder


def probe(model_or_ckpt, hf: bool):
    ids = torch.tensor([[2, 11, 15, 9, 30, 3, 0, 0], [2, 17, 5, 8, 21, 25, 13, 3]])
    mask = (ids != 0).long()
    with torch.no_grad():
        if hf:
            return model_or_ckpt(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1], mask
        return model_or_ckpt.encoder(ids, mask).last_hidden_state, mask


@pytest.mark.parametrize("cfg,heads,prune,architecture", [
    (config(), ("mlm", "pair"), None, "BertForPreTraining"),
    (config(embedding_size=16, share_layers="all", activation="gelu_tanh"), ("mlm", "pair"), None,
     "AlbertForPreTraining"),
    (config(), ("classifier",), {0: [1, 2], 1: [0]}, "BertForSequenceClassification"),
])
def test_convert_keeps_a_folder_transformers_loads_with_the_same_outputs(tmp_path, cfg, heads, prune, architecture):
    source = write(tmp_path / "src", cfg, heads, prune)
    report = convert(source, tmp_path / "out")
    assert report.architecture == architecture and report.max_difference <= 1e-4
    model, info = getattr(transformers, architecture).from_pretrained(str(tmp_path / "out"),
                                                                      output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    theirs, mask = probe(model.eval(), hf=True)
    ours, _ = probe(load_checkpoint(source), hf=False)
    assert (theirs - ours)[mask.bool()].abs().max() <= 1e-4
    if prune:     # full shapes, pruned heads zeroed, and the folder says so
        meta = json.loads((tmp_path / "out" / "bertkit.json").read_text())
        assert "full shapes" in meta["pruning"]["form"] and meta["pruning"]["pruned_heads"] == {"0": [1, 2], "1": [0]}
        assert "pruned_heads" not in json.loads((tmp_path / "out" / "config.json").read_text())


def _linear(method: str):
    """A folder with bertkit.json's "linear" section, as the linear-probe / hybrid / baseline writers save it."""
    def make(folder):
        write(folder, config())
        meta_path = folder / "bertkit.json"
        meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "linear": {"method": method}}))
        return folder
    return make


@pytest.mark.parametrize("make,message", [
    (lambda f: write(f, config(norm_position="pre")), "pre-LN"),
    (lambda f: write(f, config(share_layers="attention")), "only the attention is shared"),
    (_linear("linear-probe"), "linear-probe model"),
    (_linear("hybrid"), "hybrid model .*TF-IDF features"),
    (_linear("tfidf"), "TF-IDF \\+ linear baseline"),
])
def test_convert_refuses_models_no_transformers_class_computes(tmp_path, make, message, capsys):
    source = make(tmp_path / "src")
    with pytest.raises(BertkitError, match=message):
        convert(source, tmp_path / "out")
    assert main(["convert", str(source), str(tmp_path / "out")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "UserWarning" not in line
              and not line.startswith(" ")]     # (a tiny folder without a tokenizer warns about that)
    assert len(errors) == 1 and "cannot be converted to a transformers folder" in errors[0], errors
    assert not (tmp_path / "out").exists()


def test_a_failed_check_keeps_the_existing_target(tmp_path, monkeypatch):
    """The check runs on the temporary folder: when transformers disagrees, the old target stays as it was."""
    import bertkit.conversion as module
    from bertkit.errors import CheckpointError

    source = write(tmp_path / "src", config(), ("mlm",))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("old")

    def disagree(folder, reference, tolerance=1e-4):
        raise CheckpointError(f"{folder}: transformers computes other outputs")
    monkeypatch.setattr(module, "compare_with_transformers", disagree)
    with pytest.raises(CheckpointError, match="other outputs"):
        convert(source, tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


ELECTRA_AND_XLNET = ["ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM", "ElectraForSequenceClassification",
                     "XLNetModel", "XLNetLMHeadModel", "XLNetForSequenceClassification", "XLNetForTokenClassification"]


def family_folder(name, folder, make_xlnet_folder):
    """A random HF ELECTRA / XLNet folder of class `name`, every parameter moved off its initial value."""
    if name.startswith("XLNet"):
        make_xlnet_folder(name, folder)
        return folder
    torch.manual_seed(0)
    model = getattr(transformers, name)(transformers.ElectraConfig(
        vocab_size=40, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=40, num_labels=3)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    model.tie_weights()
    model.save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("name", ELECTRA_AND_XLNET)
def test_convert_compares_electra_and_xlnet_folders_with_transformers(tmp_path, name, make_xlnet_folder):
    source = family_folder(name, tmp_path / "src", make_xlnet_folder)
    report = convert(source, tmp_path / "out")
    assert report.architecture == name and report.max_difference is not None and report.max_difference <= 1e-4
    assert "within" in report.line()


@pytest.mark.parametrize("name", ["ElectraForPreTraining", "XLNetForSequenceClassification"])
def test_convert_refuses_an_electra_or_xlnet_folder_whose_weights_were_written_wrong(tmp_path, name, monkeypatch,
                                                                                      make_xlnet_folder, capsys):
    """A planted fault in the family writer (one weight of the last layer moved by 0.01) is caught by the
    comparison with transformers: exit 2, one line, nothing written."""
    from bertkit.checkpoints import electra, xlnet

    source = family_folder(name, tmp_path / "src", make_xlnet_folder)
    module = xlnet if name.startswith("XLNet") else electra
    write_state = module.state_to_hf

    def corrupted(encoder, heads):
        state = write_state(encoder, heads)
        victim = next(k for k in sorted(state) if "layer.1." in k and state[k].dim() == 2)
        state[victim] = state[victim].clone()
        state[victim][0, 0] += 0.01
        return state
    monkeypatch.setattr(module, "state_to_hf", corrupted)
    with pytest.raises(CheckpointError, match="computes other outputs"):
        convert(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    capsys.readouterr()
    assert main(["convert", str(source), str(tmp_path / "out")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "Warning" not in line
              and not line.startswith(" ")]
    assert len(errors) == 1 and "computes other outputs" in errors[0], errors
    assert not (tmp_path / "out").exists()


def test_bertkit_convert_stays_the_function_after_the_module_is_imported():
    # A module named bertkit/convert.py replaced the lazily exported function on the package once imported.
    import importlib

    import bertkit
    importlib.import_module("bertkit.conversion")
    assert callable(bertkit.convert) and bertkit.convert is bertkit.api.convert


def test_convert_refuses_a_target_holding_another_model_and_keeps_it(tmp_path, monkeypatch, capsys):
    """`convert pretrained finetuned` replaced the fine-tuned model with the converted one, silently. A target that
    holds another model is now refused; the source itself and an earlier conversion of the same source are not."""
    pretrained = write(tmp_path / "pretrained", config(), ("mlm",))
    finetuned = write(tmp_path / "finetuned", config(), ("classifier",))
    weights = (finetuned / "model.safetensors").read_bytes()
    assert main(["convert", str(pretrained), str(finetuned)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds another model" in err[0], err
    assert (finetuned / "model.safetensors").read_bytes() == weights
    assert load_checkpoint(finetuned).meta.get("task") == "classification"

    first = convert(pretrained, tmp_path / "hf")
    monkeypatch.chdir(tmp_path)                         # the same source named from elsewhere, converted again
    again = convert("pretrained", "hf")
    assert again.architecture == first.architecture == "BertForMaskedLM"
    assert convert(pretrained, pretrained).architecture == "BertForMaskedLM"
