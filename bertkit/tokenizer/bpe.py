"""GPT-2 byte-level BPE over the Rust `tokenizers` library: training, loading and saving HF GPT-2 folders.

Byte-level BPE (Radford et al. 2019) maps every byte to a printable character first, so any text encodes
without an unknown token; a space is carried by the following word ("Ġworld"). The one special token is
<|endoftext|>, which separates documents and ends generation. A folder holds vocab.json + merges.txt (what
GPT2Tokenizer reads), tokenizer.json (GPT2TokenizerFast) and tokenizer_config.json, as HF writes them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Sequence

from tokenizers import Tokenizer as RustTokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

from bertkit.atomic_write import json_text
from bertkit.data.corpus import check_corpus_files
from bertkit.data.text import iter_lines
from bertkit.errors import BertkitError, CheckpointError

EOS = "<|endoftext|>"
LINES_PER_BATCH = 1000
DEFAULT_MAX_LENGTH = 1024


class BPETokenizer:
    """A GPT-2 byte-level BPE tokenizer. Build with train_bpe / from_folder / from_files."""

    lowercase = False  # byte-level BPE keeps text as is (shards and fingerprints read this)

    def __init__(self, backend: RustTokenizer, model_max_length: int = DEFAULT_MAX_LENGTH):
        self.backend = backend
        self.model_max_length = model_max_length
        eos = backend.token_to_id(EOS)
        if eos is None:
            raise CheckpointError(f"the BPE vocabulary has no {EOS} token; GPT-2 vocabularies end with it")
        self.eos_id = eos
        self.special_ids = {eos}

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> "BPETokenizer":
        for path in (vocab_json, merges_txt):
            if not Path(path).is_file():
                raise CheckpointError(f"{path}: missing; a GPT-2 tokenizer needs vocab.json and merges.txt")
        try:
            model = BPE.from_file(str(vocab_json), str(merges_txt))
        except Exception as err:  # the Rust loader raises a bare Exception with the parse error
            raise CheckpointError(f"{vocab_json} / {merges_txt}: not a valid BPE vocabulary ({err})") from None
        backend = _configure(RustTokenizer(model))
        if backend.token_to_id(EOS) is not None:
            backend.add_special_tokens([EOS])
        return cls(backend)

    @classmethod
    def from_folder(cls, folder: str | Path) -> "BPETokenizer":
        """From tokenizer.json if present, else vocab.json + merges.txt."""
        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"{folder}: not a folder (a GPT-2 folder holds vocab.json and merges.txt)")
        if (folder / "tokenizer.json").is_file():
            try:
                backend = RustTokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as err:
                raise CheckpointError(f"{folder / 'tokenizer.json'}: cannot be read ({err})") from None
            if not isinstance(backend.model, BPE):
                raise CheckpointError(f"{folder / 'tokenizer.json'}: holds a {type(backend.model).__name__} "
                                      "model, not byte-level BPE; this is not a GPT-2 tokenizer")
            tokenizer = cls(backend)
        else:
            tokenizer = cls.from_files(folder / "vocab.json", folder / "merges.txt")
        max_length = _read_json(folder / "tokenizer_config.json").get("model_max_length")
        if isinstance(max_length, int) and 0 < max_length < 10**9:
            tokenizer.model_max_length = max_length
        return tokenizer

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.backend.model.save(str(folder))                     # vocab.json, merges.txt
        # The model's own vocab.json lacks the added <|endoftext|>; GPT-2's lists it (id 50256), so write all.
        vocab = dict(sorted(self.backend.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1]))
        (folder / "vocab.json").write_text(json_text(vocab), encoding="utf-8")
        self.backend.save(str(folder / "tokenizer.json"))
        special = {"bos_token": EOS, "eos_token": EOS, "unk_token": EOS}
        config = {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False,
                  "model_max_length": self.model_max_length, **special}
        (folder / "tokenizer_config.json").write_text(json_text(config), encoding="utf-8")
        (folder / "special_tokens_map.json").write_text(json_text(special), encoding="utf-8")

    # ---- vocabulary and encoding --------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def tokenize(self, text: str) -> list[str]:
        return self.backend.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"


def train_bpe(files: Sequence[str | Path], vocab_size: int = 50257, min_frequency: int = 2,
              encoding: str = "utf-8", show_progress: bool = False) -> BPETokenizer:
    """A byte-level BPE tokenizer trained on text files (.gz too); the 256 byte symbols come first and
    <|endoftext|> last, as in GPT-2's vocabulary."""
    paths = check_corpus_files(files)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size <= len(alphabet) + 1:
        raise BertkitError(f"vocab_size {vocab_size} leaves no room for merges after the {len(alphabet)} byte "
                           "symbols and <|endoftext|>; raise --vocab-size")
    backend = _configure(RustTokenizer(BPE()))
    # EOS is added after training so it takes the last id, where GPT-2 has it (50256).
    trainer = BpeTrainer(vocab_size=vocab_size - 1, min_frequency=min_frequency, initial_alphabet=alphabet,
                         special_tokens=[], show_progress=show_progress)
    lines = _Lines(paths, encoding)
    backend.train_from_iterator(lines.batches(), trainer=trainer)
    if lines.error is not None:   # raised inside Rust's iteration: re-raise the original, not Rust's wrapper
        raise lines.error
    if lines.count == 0:
        raise BertkitError(f"the corpus is empty: no non-blank lines in {', '.join(map(str, paths))}")
    backend.add_special_tokens([EOS])
    return BPETokenizer(backend)


def _configure(backend: RustTokenizer) -> RustTokenizer:
    """GPT-2's pipeline: ByteLevel pre-tokenizer (no prefix space), ByteLevel decoder and post-processor."""
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    return backend


class _Lines:
    def __init__(self, paths: list[Path], encoding: str):
        self.paths, self.encoding = paths, encoding
        self.count = 0
        self.error: Exception | None = None

    def batches(self) -> Iterator[list[str]]:
        batch: list[str] = []
        try:
            for path in self.paths:
                for _, text in iter_lines(path, self.encoding):
                    if text.strip():
                        batch.append(text)
                        self.count += 1
                    if len(batch) >= LINES_PER_BATCH:
                        yield batch
                        batch = []
        except Exception as err:   # kept for the caller: Rust would replace it with its own message
            self.error = err
            return
        if batch:
            yield batch


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: invalid JSON ({err})") from None
    return value if isinstance(value, dict) else {}
