"""Token classification (NER): word-level tags on sub-word tokens, and sliding windows for long sentences.

Each word's tag goes on its first sub-token; the other sub-tokens are ignored by the loss (-100) and by
prediction (as in BERT's paper, section 5.3). Words are joined by spaces and tokenized once, and each
sub-token is mapped back to its word by character offsets, so any WordPiece tokenizer works.
A sentence longer than max_length becomes overlapping windows (never cut); at prediction each word takes
its tag from the window where it sits farthest from an edge, i.e. with the most context on both sides.
"""
from __future__ import annotations

import bisect
import re
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.data.ner_readers import TaggedSentence
from bertkit.errors import BertkitError
from bertkit.finetune.entity_metrics import entity_scores
from bertkit.finetune.inference import forward_features
from bertkit.finetune.predictions import entity_prediction, softmax

IGNORE = -100
# Raw text for prediction: CJK characters one word each (as Chinese NER data is tagged), else runs of
# word characters, else single punctuation marks.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# combining marks belong to the word before them ("Jose" + U+0301 is one word, as "José" is)
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_WORD = re.compile(rf"[{_CJK}][{_MARKS}]*|(?:[^\W{_CJK}]|[{_MARKS}])+|[^\w\s{_MARKS}][{_MARKS}]*")


class NERFeature(NamedTuple):
    input_ids: list[int]
    token_type_ids: list[int]
    labels: list[int]          # tag id at each word's first sub-token, IGNORE elsewhere
    word_ids: list[int]        # word index at each first sub-token, -1 elsewhere
    sentence: int              # index of the sentence this window belongs to
    window_start: int          # position of the window's first sub-token within the sentence


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    spans = [m.span() for m in _WORD.finditer(text)]
    return [text[a:b] for a, b in spans], spans


def sentences_of_texts(texts: Sequence[str]) -> tuple[list[TaggedSentence], list[list[tuple[int, int]]]]:
    """Raw texts -> (one untagged sentence of split_words' words each, each word's character span): what
    Model.predict and the server tag. A text with no word is one blank word, so every text gets a row."""
    sentences, spans = [], []
    for index, text in enumerate(texts):
        words, word_spans = split_words(text)
        sentences.append(TaggedSentence(words or [" "], None, index))
        spans.append(word_spans)
    return sentences, spans


def first_piece_words(token_starts: Sequence[int], word_starts: Sequence[int]) -> list[int]:
    """Per sub-token (character start of each, in order): its word's index when it is that word's first
    sub-token, else -1. Words are located by their character starts (sorted), so any tokenizer works."""
    word_ids, previous = [], -1
    for start in token_starts:
        word = bisect.bisect_right(word_starts, start) - 1
        word_ids.append(word if word != previous else -1)
        previous = word
    return word_ids


class TooManyWindows(BertkitError):
    """Sentences that make more windows than a caller takes at once (the server: a 413)."""

    def __init__(self, windows: int):
        super().__init__(f"{windows} windows")
        self.windows = windows


class NERTask:
    task = "ner"

    def __init__(self, tokenizer, label_names: Sequence[str], max_length: int, stride: Optional[int] = None):
        self.tokenizer, self.max_length = tokenizer, max_length
        self.label_names = list(label_names)
        self.label_index = {name: i for i, name in enumerate(self.label_names)}
        window = max_length - 2
        self.stride = stride if stride is not None else window // 4   # overlap between windows, in sub-tokens
        if window < 2 or not 0 <= self.stride < window:
            raise BertkitError(f"NER windows need max_length >= 4 and 0 <= stride < max_length - 2; got "
                             f"max_length={max_length}, stride={self.stride}")

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def windows_of(self, num_tokens: int) -> int:
        """How many windows encode makes of a sentence of num_tokens word pieces ([CLS] / [SEP] not counted)."""
        window, step = self.max_length - 2, self.max_length - 2 - self.stride
        return 1 + -(-max(0, num_tokens - window) // step)

    def encode(self, sentences: Sequence[TaggedSentence], max_windows: Optional[int] = None) -> list[NERFeature]:
        """Windows over each sentence's word pieces. max_windows: TooManyWindows, counted from the one
        tokenization, before any window is built (the server's bound on what one request may queue)."""
        texts, starts = [], []
        for sentence in sentences:
            offsets, position = [], 0
            for word in sentence.tokens:
                offsets.append(position)
                position += len(word) + 1
            texts.append(" ".join(sentence.tokens))
            starts.append(offsets)
        encoded = self.tokenizer.encode_batch(texts, max_length=None, truncation=None)
        if max_windows is not None:
            windows = sum(self.windows_of(len(ids) - 2) for ids in encoded.input_ids)
            if windows > max_windows:
                raise TooManyWindows(windows)
        cls_id, sep_id = self.tokenizer.cls_id, self.tokenizer.sep_id
        window, step = self.max_length - 2, self.max_length - 2 - self.stride
        features = []
        for index, (sentence, ids, offsets) in enumerate(zip(sentences, encoded.input_ids, encoded.offsets)):
            ids, offsets = ids[1:-1], offsets[1:-1]                 # drop [CLS] / [SEP]
            word_ids = first_piece_words([start for start, _ in offsets], starts[index])
            tags = sentence.tags
            labels = [self.label_index[tags[w]] if w >= 0 and tags is not None else IGNORE for w in word_ids]
            begin = 0
            while True:
                end = min(begin + window, len(ids))
                features.append(NERFeature([cls_id, *ids[begin:end], sep_id], [0] * (end - begin + 2),
                                           [IGNORE, *labels[begin:end], IGNORE],
                                           [-1, *word_ids[begin:end], -1], index, begin))
                if end >= len(ids):
                    break
                begin += step
        return features

    def make_targets(self, features: Sequence[NERFeature], length: int) -> torch.Tensor:
        out = torch.full((len(features), length), IGNORE, dtype=torch.long)
        for i, f in enumerate(features):
            out[i, :len(f.labels)] = torch.as_tensor(f.labels)
        return out

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE)

    def predict_words(self, model, features: Sequence[NERFeature], sentences: Sequence[TaggedSentence],
                      batch_size: int = 64) -> list[tuple[list[str], list[float]]]:
        """Per sentence: one tag per word and its probability; words the tokenizer dropped entirely (e.g.
        control characters) get O with probability 1."""
        return self.words_from_windows(features, forward_features(model, features, self.tokenizer.pad_id,
                                                                  batch_size), sentences)

    def words_from_windows(self, features: Sequence[NERFeature], outputs: Sequence[np.ndarray],
                           sentences: Sequence[TaggedSentence]) -> list[tuple[list[str], list[float]]]:
        """predict_words from each window's (T, L) logits, however they were computed (the server batches them
        with other requests): a word seen by two windows takes the tag of the one where it sits further from
        the window's edge."""
        best: list[dict[int, tuple[int, int, float]]] = [{} for _ in sentences]   # word -> (edge distance, tag, p)
        for feature, logits in zip(features, outputs):
            probabilities = softmax(logits)
            predicted = probabilities.argmax(-1)
            last = len(feature.input_ids) - 1
            for position, word in enumerate(feature.word_ids):
                if word < 0:
                    continue
                distance = min(position, last - position)
                current = best[feature.sentence].get(word)
                if current is None or distance > current[0]:
                    tag = int(predicted[position])
                    best[feature.sentence][word] = (distance, tag, float(probabilities[position, tag]))
        return [([self.label_names[found[w][1]] if w in found else "O" for w in range(len(sentence.tokens))],
                 [found[w][2] if w in found else 1.0 for w in range(len(sentence.tokens))])
                for sentence, found in zip(sentences, best)]

    def predict_tags(self, model, features: Sequence[NERFeature], sentences: Sequence[TaggedSentence],
                     batch_size: int = 64) -> list[list[str]]:
        return [tags for tags, _ in self.predict_words(model, features, sentences, batch_size)]

    def evaluate(self, model, features, sentences, batch_size: int = 64) -> dict[str, float]:
        predicted = self.predict_tags(model, features, sentences, batch_size)
        scores = entity_scores([s.tags for s in sentences], predicted)
        flat = {k: v for k, v in scores.items() if k != "per_type"}
        for entity_type, values in scores["per_type"].items():
            flat[f"{entity_type}_f1"] = values["f1"]
        gold = [t for s in sentences for t in s.tags]
        flat["token_accuracy"] = float(np.mean([g == p for g, p in zip(gold, [t for s in predicted for t in s])]))
        return flat

    def predict(self, model, features, sentences, batch_size: int = 64,
                char_spans: Optional[list[list[tuple[int, int]]]] = None,
                texts: Optional[list[str]] = None) -> list[dict]:
        """Per sentence: its tags and entities (word span, and character span into the raw text when given)."""
        outputs = forward_features(model, features, self.tokenizer.pad_id, batch_size)
        return self.describe(features, outputs, sentences, char_spans, texts)

    def describe(self, features: Sequence[NERFeature], outputs: Sequence[np.ndarray],
                 sentences: Sequence[TaggedSentence], char_spans: Optional[list[list[tuple[int, int]]]] = None,
                 texts: Optional[list[str]] = None) -> list[dict]:
        """predict from each window's (T, L) logits."""
        words = self.words_from_windows(features, outputs, sentences)
        with_text = char_spans is not None and texts is not None
        return [entity_prediction(sentence.tokens, tags, probabilities, char_spans[i] if with_text else None,
                                  texts[i] if with_text else None)
                for i, (sentence, (tags, probabilities)) in enumerate(zip(sentences, words))]
