"""Request texts -> token sequences, with one defined outcome per text.

Rules (the API documentation repeats them):
- an empty or whitespace-only text (or either side of a pair) is refused with 422 naming its index:
  it has no meaning to embed, and silently returning the vector of "[CLS] [SEP]" hides a data bug;
- "a ||| b" is a sentence pair (bert-as-service's separator): segment ids 0 and 1;
- a text longer than the model's limit (special tokens included) is refused with 422 naming its index,
  its length and the limit, unless the request says `"truncate": true`; then it is cut (longest side
  first for pairs) and its index is listed in the response's `truncated` field. Never silently.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

from bertkit.tokenizer.coverage import warn_unknown
from bertkit.tokenizer.encoding import keep_head_and_tail
from bertkit.tokenizer.tokenizer import EMPTY_TEXT, InvalidTextError

PAIR_SEPARATOR = "|||"
MAX_ERRORS_SHOWN = 5


class TokenSequence(NamedTuple):
    input_ids: list[int]
    token_type_ids: list[int]
    pair: bool = False      # a text pair: the model reads its segments; single texts are fed without them, as
                            # Model.encode and transformers' default do (XLNet's tokenizer puts <cls> in segment 2)


class PreparedTexts(NamedTuple):
    sequences: list[TokenSequence]
    truncated: list[int]        # indices of texts that were cut to the model's limit


class InputRejected(Exception):
    """Texts that cannot be encoded as sent; the message names them. Answered with 422."""


def _raise_if(errors: list[str]) -> None:
    if errors:
        more = f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise InputRejected("; ".join(errors[:MAX_ERRORS_SHOWN]) + more)


def _too_long(index: int, length: int, max_length: int, field: str) -> str:
    return (f"{field}[{index}] has {length} tokens, more than the model's limit of {max_length} "
            f"(special tokens included); shorten it or send \"truncate\": true")


def split_pairs(texts: Sequence[str], field: str = "texts", allow_pairs: bool = True) -> list[str | tuple[str, str]]:
    """Each text as it is, or "a ||| b" as the pair (a, b) with both sides stripped; InputRejected names the
    empty or whitespace-only ones (and pairs with an empty side)."""
    errors: list[str] = []
    items: list[str | tuple[str, str]] = []
    for index, text in enumerate(texts):
        if allow_pairs and PAIR_SEPARATOR in text:
            first, second = (part.strip() for part in text.split(PAIR_SEPARATOR, 1))
            if not first or not second:
                errors.append(f"{field}[{index}] is a pair with an empty side; write \"first ||| second\"")
            items.append((first, second))
        elif not text.strip():
            errors.append(f"{field}[{index}] {EMPTY_TEXT}")
        else:
            items.append(text)
    _raise_if(errors)
    return items


def prepare_texts(tokenizer, texts: Sequence[str], max_length: int, truncate: bool,
                  field: str = "texts", allow_pairs: bool = True, head_and_tail: bool = False) -> PreparedTexts:
    """head_and_tail: a request of single texts only cuts each long one to its start and end, as a classifier
    fine-tuned with long_texts "head+tail" predicts in Model.predict (finetune/classification.py)."""
    items = split_pairs(texts, field, allow_pairs)
    singles = [(index, item) for index, item in enumerate(items) if isinstance(item, str)]
    pairs = [(index, *item) for index, item in enumerate(items) if not isinstance(item, str)]
    if head_and_tail and not pairs:
        return _head_and_tail(tokenizer, singles, max_length, truncate, field)
    return _tokenize(tokenizer, len(texts), singles, pairs, max_length, truncate, field)


def _head_and_tail(tokenizer, singles: list[tuple[int, str]], max_length: int, truncate: bool,
                   field: str) -> PreparedTexts:
    texts = [text for _, text in singles]
    try:
        batch = tokenizer.encode_batch(texts, max_length=None, truncation=None)
    except InvalidTextError as err:
        raise InputRejected(f"{field}[{singles[err.index][0]}] {err.reason}") from None
    warn_unknown(tokenizer, texts, "server request texts", batch.input_ids)
    sequences, truncated, errors = [], [], []
    for (index, _), ids in zip(singles, batch.input_ids):
        row, cut = keep_head_and_tail(ids, max_length)
        if cut and not truncate:
            errors.append(_too_long(index, len(ids), max_length, field))
        truncated.extend([index] if cut else [])
        sequences.append(TokenSequence(row, [0] * len(row), False))
    _raise_if(errors)
    return PreparedTexts(sequences, truncated)


def prepare_pairs(tokenizer, texts: Sequence[str], query: str, max_length: int, truncate: bool,
                  field: str = "texts") -> PreparedTexts:
    """(query, text) pairs for a cross-encoder: segment 0 the query, segment 1 each text ("|||" is plain text)."""
    if not query.strip():
        raise InputRejected("query is empty or whitespace-only; send some text")
    _raise_if([f"{field}[{i}] {EMPTY_TEXT}"
               for i, text in enumerate(texts) if not text.strip()])
    return _tokenize(tokenizer, len(texts), [], [(i, query, text) for i, text in enumerate(texts)], max_length,
                     truncate, field)


def _tokenize(tokenizer, count: int, singles: list[tuple[int, str]], pairs: list[tuple[int, str, str]],
              max_length: int, truncate: bool, field: str) -> PreparedTexts:
    errors: list[str] = []
    sequences: list[TokenSequence | None] = [None] * count
    truncated: list[int] = []
    for group, is_pair in ((singles, False), (pairs, True)):
        if not group:
            continue
        firsts = [item[1] for item in group]
        seconds = [item[2] for item in group] if is_pair else None
        try:
            batch = tokenizer.encode_batch(firsts, pairs=seconds, max_length=max_length, truncation="longest_first")
        except InvalidTextError as err:
            raise InputRejected(f"{field}[{group[err.index][0]}] {err.reason}") from None
        cut = [k for k, was_cut in enumerate(batch.truncated) if was_cut]
        if cut and not truncate:
            # Full lengths for the message only: the error path may pay for a second tokenization.
            full = tokenizer.encode_batch([firsts[k] for k in cut],
                                          pairs=[seconds[k] for k in cut] if is_pair else None,
                                          max_length=1 << 30, truncation=None)
            errors.extend(_too_long(group[k][0], len(ids), max_length, field)
                          for k, ids in zip(cut, full.input_ids))
            continue
        truncated.extend(group[k][0] for k in cut)
        warn_unknown(tokenizer, firsts + (seconds or []), "server request texts", batch.input_ids)  # once per model
        for k, item in enumerate(group):
            sequences[item[0]] = TokenSequence(list(batch.input_ids[k]), list(batch.token_type_ids[k]), is_pair)
    _raise_if(errors)
    return PreparedTexts(sequences, sorted(truncated))  # type: ignore[arg-type]


def prepare_windows(tokenizer, texts: Sequence[str], max_length: int, stride: int,
                    field: str = "query") -> PreparedTexts:
    """One text as overlapping windows of max_length tokens, as `Model.encode(long_texts="sliding-window")`
    reads it (features.encode_texts): the caller averages the windows' vectors. Nothing is cut."""
    try:
        windows = tokenizer.encode_windows(list(texts), max_length=max_length, stride=stride)
    except InvalidTextError as err:
        raise InputRejected(f"{field} {err.reason}") from None
    warn_unknown(tokenizer, list(texts), "server request texts", windows.encoding.input_ids)
    encoding = windows.encoding
    return PreparedTexts([TokenSequence(list(ids), list(types), False)
                          for ids, types in zip(encoding.input_ids, encoding.token_type_ids)], [])


def prepare_tokens(tokenizer, token_lists: Sequence[Sequence[str]], max_length: int,
                   truncate: bool) -> PreparedTexts:
    """Pre-tokenized input (bert-as-service's is_tokenized): WordPiece tokens, [CLS]/[SEP] added here.

    Unknown tokens become [UNK], as the tokenizer would make them.
    """
    errors: list[str] = []
    sequences: list[TokenSequence] = []
    truncated: list[int] = []
    for index, tokens in enumerate(token_lists):
        tokens = [t for t in tokens if t.strip()]
        if not tokens:
            errors.append(f"texts[{index}] has no tokens; remove it or send some tokens")
            continue
        try:
            ids = [_token_id(tokenizer, t) for t in tokens]
        except InvalidTextError as err:
            errors.append(f"texts[{index}] {err.reason}")
            continue
        if len(ids) + 2 > max_length:
            if not truncate:
                errors.append(_too_long(index, len(ids) + 2, max_length, "texts"))
                continue
            ids = ids[:max_length - 2]
            truncated.append(index)
        ids = [tokenizer.cls_id, *ids, tokenizer.sep_id]
        sequences.append(TokenSequence(ids, [0] * len(ids)))
    _raise_if(errors)
    return PreparedTexts(sequences, truncated)


def _token_id(tokenizer, token: str) -> int:
    found = tokenizer.token_to_id(token)
    return tokenizer.unk_id if found is None else found


def prepare_ids(tokenizer, id_lists: Sequence[Sequence[int]], max_length: int, truncate: bool,
                field: str = "input") -> PreparedTexts:
    """Token ids (OpenAI's token-array input): checked against the vocabulary, [CLS]/[SEP] added, unless the list
    already starts with [CLS] and ends with [SEP] (the input_ids /tokenize answers): then it is not framed twice."""
    errors: list[str] = []
    sequences: list[TokenSequence] = []
    truncated: list[int] = []
    vocab_size = tokenizer.vocab_size
    for index, ids in enumerate(id_lists):
        ids = list(ids)
        if len(ids) >= 2 and ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.sep_id:
            ids = ids[1:-1]
        bad = [i for i in ids if not 0 <= i < vocab_size]
        if not ids or bad:
            errors.append(f"{field}[{index}] " + (f"has token ids outside 0..{vocab_size - 1}: {bad[:3]}"
                                                  if bad else "is an empty token list"))
            continue
        if len(ids) + 2 > max_length:
            if not truncate:
                errors.append(_too_long(index, len(ids) + 2, max_length, field))
                continue
            ids = ids[:max_length - 2]
            truncated.append(index)
        ids = [tokenizer.cls_id, *ids, tokenizer.sep_id]
        sequences.append(TokenSequence(ids, [0] * len(ids)))
    _raise_if(errors)
    return PreparedTexts(sequences, truncated)


class TokenizedText(NamedTuple):
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]]


def tokenize_texts(tokenizer, texts: Sequence[str]) -> list[TokenizedText]:
    """Every token of every text (pairs split on "|||"), nothing cut: what the model would see untruncated."""
    singles = [(i, t) for i, t in enumerate(texts) if PAIR_SEPARATOR not in t]
    pairs = [(i, *(p.strip() for p in t.split(PAIR_SEPARATOR, 1))) for i, t in enumerate(texts)
             if PAIR_SEPARATOR in t]
    out: list[TokenizedText | None] = [None] * len(texts)
    for group, is_pair in ((singles, False), (pairs, True)):
        if not group:
            continue
        try:
            batch = tokenizer.encode_batch([g[1] for g in group], pairs=[g[2] for g in group] if is_pair else None,
                                           max_length=1 << 30, truncation=None)
        except InvalidTextError as err:
            raise InputRejected(f"texts[{group[err.index][0]}] {err.reason}") from None
        for k, item in enumerate(group):
            out[item[0]] = TokenizedText(batch.input_ids[k], batch.token_type_ids[k],
                                         [tuple(o) for o in batch.offsets[k]])
    return out  # type: ignore[return-value]
