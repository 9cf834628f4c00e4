"""XLNet's tokenizer: a SentencePiece unigram model over the Rust `tokenizers` library, framed XLNet's way.

A text becomes `A <sep> <cls>` and a pair `A <sep> B <sep> <cls>`, segments 0 for A (and its <sep>), 1 for B,
2 for <cls>: the special tokens come last, and XLNet reads its sequence summary from the last token. Batches
pad on the left, as HF's XLNetTokenizer does. Ids match transformers' XLNetTokenizer.

A folder's `tokenizer.json` is used as it is; without one, `spiece.model` is read (sentencepiece_model.py,
no sentencepiece package needed) and turned into the same Rust pipeline transformers builds from it:
`` and '' -> ", NFKD and accents stripped (unless keep_accents), lowercasing (do_lower_case), the model's
precompiled character map, whitespace split and "▁" word prefixes.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Sequence

import torch
from tokenizers import AddedToken, Encoding, Tokenizer as RustTokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram

from bertkit.atomic_write import json_text
from bertkit.errors import CheckpointError
from bertkit.tokenizer.encoding import BatchEncoding, Truncation, WindowedEncoding
from bertkit.tokenizer.roberta import SpecialTokens
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.tokenizer.sentencepiece_model import CONTROL, USER_DEFINED, read_sentencepiece_model
from bertkit.tokenizer.tokenizer import DEFAULT_MAX_LENGTH, HF_NO_LIMIT, Tokenizer, _read_json

SPIECE_FILE = "spiece.model"
SEGMENT_CLS = 2      # HF XLNetTokenizer's token type of <cls>; A is 0, B 1, padding 0 (as it pads)


class XLNetSpecials(NamedTuple):
    unk: str = "<unk>"
    bos: str = "<s>"
    eos: str = "</s>"
    cls: str = "<cls>"
    sep: str = "<sep>"
    pad: str = "<pad>"
    mask: str = "<mask>"
    extra: tuple[str, ...] = ("<eop>", "<eod>")


_CONFIG_KEYS = ("unk", "bos", "eos", "cls", "sep", "pad", "mask")


class XLNetTokenizer(Tokenizer):
    """Build with from_folder or from_sentencepiece; encode_batch / encode_windows / pad_to_tensors frame and pad
    XLNet's way, everything else (tokenize, decode, unk_rate, ...) is the shared Tokenizer's."""

    def __init__(self, backend: RustTokenizer, specials: XLNetSpecials = XLNetSpecials(), lowercase: bool = False,
                 keep_accents: bool = False, model_max_length: int = DEFAULT_MAX_LENGTH,
                 spiece_model: bytes | None = None):
        missing = [name for name in (specials.unk, specials.cls, specials.sep, specials.pad)
                   if backend.token_to_id(name) is None]
        if missing:
            raise CheckpointError(f"the XLNet vocabulary lacks the special token(s) {', '.join(missing)}")
        super().__init__(backend, lowercase, model_max_length,
                         SpecialTokens(specials.pad, specials.unk, specials.cls, specials.sep, specials.mask))
        self.xlnet_specials, self.keep_accents, self.spiece_model = specials, keep_accents, spiece_model
        self.special_ids.discard(None)                     # a vocabulary without <mask>
        # transformers frames with the post-processor of the tokenizer.json a folder is saved with
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A:0 {specials.sep}:0 {specials.cls}:2",
            pair=f"$A:0 {specials.sep}:0 $B:1 {specials.sep}:1 {specials.cls}:2",
            special_tokens=[(specials.sep, self.sep_id), (specials.cls, self.cls_id)])
        backend.no_padding()
        backend.no_truncation()

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_sentencepiece(cls, path: str | Path, lowercase: bool = False, keep_accents: bool = False,
                           specials: XLNetSpecials = XLNetSpecials()) -> "XLNetTokenizer":
        model, data = read_sentencepiece_model(Path(path))
        backend = RustTokenizer(Unigram([(p.piece, p.score) for p in model.pieces], unk_id=model.unk_id,
                                        byte_fallback=False))
        steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
        if not keep_accents:
            steps += [normalizers.NFKD(), normalizers.StripAccents()]
        if lowercase:
            steps.append(normalizers.Lowercase())
        if model.precompiled_charsmap:
            steps.append(normalizers.Precompiled(model.precompiled_charsmap))
        backend.normalizer = normalizers.Sequence(steps)
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                        pre_tokenizers.Metaspace(replacement="▁",
                                                                                 prepend_scheme="always")])
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        vocab = {p.piece for p in model.pieces}
        named = [*(getattr(specials, key) for key in _CONFIG_KEYS), *specials.extra]
        from_model = [p.piece for i, p in enumerate(model.pieces) if p.type in (CONTROL, USER_DEFINED)
                      or i == model.unk_id]
        backend.add_special_tokens([AddedToken(token, special=True, normalized=False, lstrip=token == specials.mask)
                                    for token in dict.fromkeys([*named, *from_model]) if token in vocab])
        return cls(backend, specials, lowercase, keep_accents, spiece_model=data)

    @classmethod
    def from_folder(cls, folder: str | Path) -> "XLNetTokenizer":
        """tokenizer.json if present, else spiece.model; special tokens and casing from tokenizer_config.json."""
        folder = Path(folder)
        config = {**_read_json(folder / "special_tokens_map.json"), **_read_json(folder / "tokenizer_config.json")}
        names = {}
        for key in _CONFIG_KEYS:
            value = config.get(f"{key}_token")
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                names[key] = value
        specials = XLNetSpecials(**names)
        lowercase = config.get("do_lower_case") is True
        keep_accents = config.get("keep_accents") is True
        spiece = folder / SPIECE_FILE
        if (folder / "tokenizer.json").is_file():
            try:
                backend = RustTokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as err:  # the Rust loader raises a bare Exception
                raise CheckpointError(f"{folder / 'tokenizer.json'}: cannot be read ({err})") from None
            tokenizer = cls(backend, specials, lowercase, keep_accents,
                            spiece_model=spiece.read_bytes() if spiece.is_file() else None)
        elif spiece.is_file():
            tokenizer = cls.from_sentencepiece(spiece, lowercase, keep_accents, specials)
        else:
            raise CheckpointError(f"{folder}: no {SPIECE_FILE} or tokenizer.json; an XLNet folder needs its "
                                  "SentencePiece model (copy spiece.model from the model you started from)")
        max_length = config.get("model_max_length")
        if isinstance(max_length, int) and 0 < max_length < HF_NO_LIMIT:
            tokenizer.model_max_length = max_length
        return tokenizer

    def save(self, folder: str | Path) -> None:
        """tokenizer.json (+ spiece.model when it was read from one), tokenizer_config.json and
        special_tokens_map.json, which transformers' XLNetTokenizer loads as they are."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(folder / "tokenizer.json"))
        if self.spiece_model is not None:
            (folder / SPIECE_FILE).write_bytes(self.spiece_model)
        tokens = {f"{key}_token": getattr(self.xlnet_specials, key) for key in _CONFIG_KEYS}
        config = {"tokenizer_class": "XLNetTokenizer", "do_lower_case": self.lowercase, "remove_space": True,
                  "keep_accents": self.keep_accents, "padding_side": "left", "model_max_length": self.model_max_length,
                  "additional_special_tokens": list(self.xlnet_specials.extra), **tokens}
        for name, value in (("tokenizer_config.json", config),
                            ("special_tokens_map.json", {**tokens, "additional_special_tokens": list(self.xlnet_specials.extra)})):
            (folder / name).write_text(json_text(value), encoding="utf-8")

    def check_casing(self, texts=None) -> None:
        return None       # a SentencePiece model carries its own normalization

    # ---- framing and padding ------------------------------------------------------------------------
    def _frame(self, firsts: list[Encoding], seconds: list[Encoding] | None, max_length: int | None,
               truncation: Truncation) -> BatchEncoding:
        """A <sep> (B <sep>) <cls>: BERT's rows, cut the same way (two or three special tokens), with the
        leading <cls> moved to the end and given segment 2."""
        return _cls_last(super()._frame(firsts, seconds, max_length, truncation))

    def _frame_windows(self, splits: list[Encoding], max_length: int, stride: int) -> WindowedEncoding:
        windows = super()._frame_windows(splits, max_length, stride)
        return WindowedEncoding(_cls_last(windows.encoding), windows.text_index)

    def pad_to_tensors(self, input_ids: Sequence[Sequence[int]] | BatchEncoding,
                       token_type_ids: Sequence[Sequence[int]] | None = None,
                       pad_to_multiple_of: int | None = None) -> dict[str, torch.Tensor]:
        """Left padding, as transformers pads XLNet (the model reads the last real token either way)."""
        if isinstance(input_ids, BatchEncoding):
            input_ids, token_type_ids = input_ids.input_ids, input_ids.token_type_ids
        return pad_to_tensors(input_ids, self.pad_id, token_type_ids, pad_to_multiple_of, side="left")

    def __repr__(self) -> str:
        return f"XLNetTokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase})"



def _cls_last(batch: BatchEncoding) -> BatchEncoding:
    """[CLS] A [SEP] (B [SEP]) rows -> A [SEP] (B [SEP]) [CLS], in place."""
    for row in range(len(batch)):
        ids, types, offsets = batch.input_ids[row], batch.token_type_ids[row], batch.offsets[row]
        batch.input_ids[row] = [*ids[1:], ids[0]]
        batch.token_type_ids[row] = [*types[1:], SEGMENT_CLS]
        batch.offsets[row] = [*offsets[1:], offsets[0]]
    return batch
