"""Extractive QA (SQuAD v1.1 / v2.0): document-stride windows, n-best span decoding, no-answer for v2.0.

Following Google's run_squad.py: a row is `[CLS] question [SEP] context window [SEP]`; the question is cut
to max_question_length tokens (and to half the row); windows advance by doc_stride tokens, so a long context is read whole.
A window that does not contain the whole answer (and every window of an unanswerable question) is trained
to point at [CLS]. Decoding keeps the n_best start and end logits of every window, scores valid spans
(inside the context, end >= start, at most max_answer_length tokens) by start + end logit, and maps the
best one back to character offsets of the context. v2.0: "no answer" wins when the [CLS] score beats the
best span by more than null_threshold.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.data.squad import QAExample
from bertkit.errors import BertkitError
from bertkit.finetune.inference import forward_features
from bertkit.finetune.squad_metrics import squad_scores



class QAFeature(NamedTuple):
    input_ids: list[int]
    token_type_ids: list[int]
    example: int                              # index of the question
    context_offsets: list[Optional[tuple[int, int]]]   # per position: char span in the context, None elsewhere
    start_position: int                       # 0 ([CLS]) when the answer is not in this window
    end_position: int


class QATask:
    task = "qa"

    def __init__(self, tokenizer, max_length: int = 384, doc_stride: int = 128, max_question_length: int = 64,
                 max_answer_length: int = 30, n_best: int = 20, with_negative: bool = False,
                 null_threshold: float = 0.0):
        if max_length < 8:
            raise BertkitError(f"max_length {max_length} leaves no room for question and context; use 64 or more "
                               "(384 is BERT's SQuAD setting)")
        self.tokenizer, self.max_length, self.doc_stride = tokenizer, max_length, doc_stride
        self.max_question_length, self.max_answer_length = max_question_length, max_answer_length
        self.n_best, self.with_negative, self.null_threshold = n_best, with_negative, null_threshold
        self.label_names: list[str] = []

    def encode(self, examples: Sequence[QAExample]) -> list[QAFeature]:
        questions = self.tokenizer.encode_batch([ex.question for ex in examples], max_length=None,
                                                truncation=None)
        contexts = self.tokenizer.encode_batch([ex.context for ex in examples], max_length=None,
                                               truncation=None)
        cls_id, sep_id = self.tokenizer.cls_id, self.tokenizer.sep_id
        features = []
        for index, example in enumerate(examples):
            # The question never takes more than half the row, so every window holds some context.
            question = questions.input_ids[index][1:-1][:min(self.max_question_length, self.max_length // 2)]
            ids, offsets = contexts.input_ids[index][1:-1], contexts.offsets[index][1:-1]
            answer_span = self._answer_tokens(example, offsets)
            window = self.max_length - len(question) - 3
            begin = 0
            while True:
                end = min(begin + window, len(ids))
                prefix = [cls_id, *question, sep_id]
                start_pos = end_pos = 0
                if answer_span is not None and begin <= answer_span[0] and answer_span[1] < end:
                    start_pos = answer_span[0] - begin + len(prefix)
                    end_pos = answer_span[1] - begin + len(prefix)
                features.append(QAFeature(
                    prefix + ids[begin:end] + [sep_id], [0] * len(prefix) + [1] * (end - begin + 1), index,
                    [None] * len(prefix) + list(offsets[begin:end]) + [None], start_pos, end_pos))
                if end >= len(ids):
                    break
                begin += min(self.doc_stride, window)
        return features

    @staticmethod
    def _answer_tokens(example: QAExample, offsets: Sequence[tuple[int, int]]) -> Optional[tuple[int, int]]:
        """First and last context token of the first answer (None: no answer, or it covers no token)."""
        if not example.answers or example.is_impossible:
            return None
        answer = example.answers[0]
        answer_end = answer.start + len(answer.text)
        inside = [i for i, (a, b) in enumerate(offsets) if a < answer_end and b > answer.start]
        return (inside[0], inside[-1]) if inside else None

    def make_targets(self, features: Sequence[QAFeature], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.tensor([f.start_position for f in features], dtype=torch.long),
                torch.tensor([f.end_position for f in features], dtype=torch.long))

    def loss(self, logits: tuple[torch.Tensor, torch.Tensor], targets: tuple[torch.Tensor, torch.Tensor]):
        start, end = logits
        return (F.cross_entropy(start.float(), targets[0]) + F.cross_entropy(end.float(), targets[1])) / 2

    def decode(self, model, features: Sequence[QAFeature], examples: Sequence[QAExample],
               batch_size: int = 64) -> list[dict]:
        outputs = forward_features(model, features, self.tokenizer.pad_id, batch_size)
        return self.answers(examples, features, outputs)

    def answers(self, examples: Sequence[QAExample], features: Sequence[QAFeature], outputs: Sequence) -> list[dict]:
        """Per-window (start, end) logits -> the best answer of each example over all its windows."""
        by_example: list[list[int]] = [[] for _ in examples]
        for i, feature in enumerate(features):
            by_example[feature.example].append(i)
        return [self._best_answer(example, [features[i] for i in found], [outputs[i] for i in found])
                for example, found in zip(examples, by_example)]

    def _best_answer(self, example: QAExample, features, outputs) -> dict:
        best, null_score = None, float("inf")
        for feature, (start, end) in zip(features, outputs):
            null_score = min(null_score, float(start[0] + end[0]))
            starts = np.argsort(-start)[:self.n_best]
            ends = np.argsort(-end)[:self.n_best]
            for s in starts:
                if feature.context_offsets[s] is None:
                    continue
                for e in ends:
                    if feature.context_offsets[e] is None or e < s or e - s + 1 > self.max_answer_length:
                        continue
                    score = float(start[s] + end[e])
                    if best is None or score > best[0]:
                        best = (score, feature.context_offsets[s][0], feature.context_offsets[e][1])
        if best is None or (self.with_negative and null_score - best[0] > self.null_threshold):
            return {"id": example.id, "answer": "", "start": None, "end": None,
                    "score": None if best is None else best[0], "null_score": null_score}
        score, char_start, char_end = best
        return {"id": example.id, "answer": example.context[char_start:char_end], "start": char_start,
                "end": char_end, "score": score, "null_score": null_score}

    def evaluate(self, model, features, examples, batch_size: int = 64) -> dict[str, float]:
        predictions = {p["id"]: p["answer"] for p in self.decode(model, features, examples, batch_size)}
        golds = {ex.id: [a.text for a in ex.answers] for ex in examples}
        return squad_scores(predictions, golds)

    def predict(self, model, features, examples, batch_size: int = 64) -> list[dict]:
        return self.decode(model, features, examples, batch_size)
