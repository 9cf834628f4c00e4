"""hf_check.check_structure re-implements transformers' loading rules from config.json: held against
transformers' own classes (their save_pretrained folders pass; a missing, extra or reshaped weight is named)."""
import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit.checkpoints.hf_check import check_structure, compare_with_transformers, expected_weights
from bertkit.errors import CheckpointError

transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=40)
CASES = [("BertConfig", name) for name in ("BertModel", "BertForMaskedLM", "BertForPreTraining",
                                           "BertForNextSentencePrediction", "BertForSequenceClassification",
                                           "BertForTokenClassification", "BertForQuestionAnswering")]
CASES += [("RobertaConfig", name) for name in ("RobertaModel", "RobertaForMaskedLM",
                                               "RobertaForSequenceClassification", "RobertaForTokenClassification",
                                               "RobertaForQuestionAnswering")]
CASES += [("AlbertConfig", name) for name in ("AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining",
                                              "AlbertForSequenceClassification", "AlbertForQuestionAnswering")]


def saved(tmp_path, config_class, architecture, **extra):
    config = getattr(transformers, config_class)(**SIZES, **extra)
    if config_class == "AlbertConfig":
        config.embedding_size = 16
    torch.manual_seed(0)
    getattr(transformers, architecture)(config).save_pretrained(str(tmp_path / "m"))
    return tmp_path / "m"


@pytest.mark.parametrize("config_class,architecture", CASES)
def test_transformers_own_folders_pass(tmp_path, config_class, architecture):
    folder = saved(tmp_path, config_class, architecture, num_labels=5)
    assert check_structure(folder) == architecture


def test_gpt2_folder_passes(tmp_path):
    config = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=40)
    transformers.GPT2LMHeadModel(config).save_pretrained(str(tmp_path / "m"))
    assert check_structure(tmp_path / "m") == "GPT2LMHeadModel"


@pytest.mark.parametrize("edit,message", [
    (lambda w: w.pop("bert.encoder.layer.1.output.dense.weight"), "missing bert.encoder.layer.1.output.dense.weight"),
    (lambda w: w.update({"bert.extra.weight": torch.zeros(3)}), "unexpected bert.extra.weight"),
    (lambda w: w.update({"classifier.weight": torch.zeros(2, 32)}), r"classifier.weight \(2, 32\) \(expects \(5, 32\)\)"),
])
def test_a_folder_transformers_would_not_load_as_is_is_named(tmp_path, edit, message):
    folder = saved(tmp_path, "BertConfig", "BertForSequenceClassification", num_labels=5)
    weights = load_file(str(folder / "model.safetensors"))
    edit(weights)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=message):
        check_structure(folder)


def test_the_rules_agree_with_transformers_own_parameter_names():
    """Every parameter of the instantiated class is expected (tied decoders optional), nothing more."""
    for config_class, architecture in CASES:
        config = getattr(transformers, config_class)(**SIZES, num_labels=5)
        model = getattr(transformers, architecture)(config)
        theirs = {name: tuple(p.shape) for name, p in model.state_dict().items()
                  if "position_ids" not in name and "token_type_ids" not in name}
        required, optional = expected_weights({**config.to_dict(), "architectures": [architecture]})
        assert set(required) <= set(theirs) <= set(required) | set(optional), architecture
        assert all(theirs[n] == s for n, s in required.items()), architecture


def test_comparison_runs_a_model_fresh_from_training_in_eval_mode(tmp_path):
    """prune-heads checks its transformers/ copy with the model it just scored in train mode: dropout must be
    off for the comparison, and the model's mode is given back."""
    from bertkit.checkpoints import Checkpoint, save_checkpoint
    from bertkit.checkpoints.hf_check import compare_with_transformers
    from bertkit.model import Encoder, EncoderConfig

    config = EncoderConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                           max_position_embeddings=40, hidden_dropout=0.3, attention_dropout=0.3)
    encoder = Encoder(config).train()
    save_checkpoint(tmp_path / "m", encoder, None)
    architecture, difference = compare_with_transformers(tmp_path / "m", Checkpoint(config, encoder, None, {}))
    assert architecture == "BertModel" and difference <= 1e-5 and encoder.training


def test_a_model_saved_in_bf16_holds_its_model_for_transformers(tmp_path):
    """A model loaded with precision bf16 and saved keeps bf16 weights; transformers holds the same model
    (compared in fp32: bf16 compute would differ by its rounding, ~1e-2, not by a wrong folder)."""
    import bertkit
    from bertkit.checkpoints import load_checkpoint, save_checkpoint
    from bertkit.model import Encoder, EncoderConfig

    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                           max_position_embeddings=32)
    save_checkpoint(tmp_path / "fp32", Encoder(config).eval(), None)
    bertkit.load(tmp_path / "fp32", precision="bf16").save(tmp_path / "bf16")
    architecture, difference = compare_with_transformers(tmp_path / "bf16", load_checkpoint(tmp_path / "bf16"))
    assert architecture == "BertModel" and difference <= 1e-4
