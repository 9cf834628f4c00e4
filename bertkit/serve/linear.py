"""/predict for linear models' folders (TF-IDF baseline, linear probe, hybrid): the offline predictor's answers.

POST /predict runs the same LinearPredictor that `bertkit predict` and `bertkit.load(folder).predict` run
(in a worker thread), so the served and offline predictions are the same numbers. The input rules are the
server's: empty texts are refused with 422 naming them, "a ||| b" is a pair (and a pair model takes only
pairs), and for a model that reads vectors a text over its encoder's limit is refused unless `truncate`.
A TF-IDF folder has no encoder: /predict, /status and /health answer; /encode, /v1/embeddings and /tokenize
answer 409 with the reason.
"""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

import numpy as np

from bertkit.data.readers import TextExample
from bertkit.finetune.linear import LinearPredictor
from bertkit.serve.config import ServeConfig
from bertkit.serve.inputs import InputRejected, prepare_texts, split_pairs
from bertkit.serve.runner import ModelRunner, SelfTestFailed
from bertkit.serve.service import EmbeddingService, ServiceError
from bertkit.serve.stats import ServerStats

SELF_TEST_TEXT = "bertkit self-test: the quick brown fox jumps over the lazy dog."


async def predict_linear(service: EmbeddingService, linear: LinearPredictor, texts: Sequence[Any],
                         truncate: bool) -> tuple[list[dict], list[int]]:
    service.check_count(len(texts))
    objects = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if objects:
        raise ServiceError(422, f"texts[{objects[0]}] is a question/context object, but this model was trained "
                                f"for {linear.task!r}; send texts")
    try:
        items = split_pairs(texts, allow_pairs=linear.model.pairs)
    except InputRejected as rejected:
        raise ServiceError(422, str(rejected)) from None
    singles = [i for i, item in enumerate(items) if isinstance(item, str)]
    if linear.model.pairs and singles:
        raise ServiceError(422, f"texts[{singles[0]}] is a single text; this model classifies pairs: send "
                                "\"first ||| second\"")
    examples = [TextExample(item, None, None, i) if isinstance(item, str) else TextExample(*item, None, i)
                for i, item in enumerate(items)]
    truncated = await _check_lengths(service, linear, examples, truncate)
    predictions = await asyncio.to_thread(linear.predict_examples, examples)
    service.stats.texts += len(examples)
    return predictions, truncated


async def _check_lengths(service: EmbeddingService, linear: LinearPredictor, examples: Sequence[TextExample],
                         truncate: bool) -> list[int]:
    """Texts over the vectors' encoder limit (each side of a pair is encoded alone): 422, or with `truncate`
    their indices (the predictor cuts them as `bertkit predict` does). TF-IDF reads any length."""
    if linear.max_length is None:
        return []
    sides = [(ex.line, text) for ex in examples for text in (ex.text, ex.text_pair) if text is not None]
    try:
        prepared = await service.prepare(prepare_texts, [text for _, text in sides], linear.max_length, truncate,
                                         allow_pairs=False)
    except ServiceError as error:   # names the side's position; say which request item it belongs to
        raise ServiceError(error.status, f"{error.message} (pair models count each side of \"a ||| b\" as one "
                                         "text)" if linear.model.pairs else error.message) from None
    return sorted({sides[k][0] for k in prepared.truncated})


class LinearService(EmbeddingService):
    """A linear probe's or hybrid's folder: vectors from its (frozen) encoder, /predict from its linear model."""

    def __init__(self, config: ServeConfig, runner: ModelRunner, linear: LinearPredictor, model_name: str = "bertkit"):
        super().__init__(config, runner, None, model_name)
        self.linear = linear

    @property
    def can_predict(self) -> bool:
        return True

    @property
    def task(self) -> str:
        return self.linear.task

    async def predict(self, texts: list, truncate: bool) -> tuple[list[dict], list[int]]:
        return await predict_linear(self, self.linear, texts, truncate)

    def status(self) -> dict:
        status = super().status()
        status["model"].update(method=self.linear.method, task=self.linear.task, labels=self.linear.label_names)
        return status


class TfidfService(LinearService):
    """A TF-IDF folder has no encoder: predictions only."""

    def __init__(self, config: ServeConfig, linear: LinearPredictor, model_name: str = "bertkit"):
        self.config, self.runner, self.index, self.model_name = config, None, None, model_name
        self.linear = linear
        self.stats = ServerStats()
        self.qa_task = None
        self.self_test = linear_self_test(linear)

    def require_encoder(self) -> None:
        raise ServiceError(409, self.linear.refusal())

    def close(self) -> None:
        return None

    def status(self) -> dict:
        linear = self.linear
        return {"model": {"name": self.model_name, "method": linear.method, "task": linear.task,
                          "labels": linear.label_names, "predict": True, "dimension": None, "device": "cpu"},
                "limits": {"max_request_texts": self.config.max_request_texts,
                           "max_request_bytes": self.config.max_request_bytes,
                           "request_timeout_s": self.config.request_timeout_s},
                "config": self.config.public_dict(), "self_test": self.self_test,
                "counters": self.stats.as_dict(), "latency": self.stats.latency()}


def linear_self_test(linear: LinearPredictor) -> dict:
    """Predict a fixed text (or pair); the scores must be finite."""
    example = TextExample(SELF_TEST_TEXT, SELF_TEST_TEXT if linear.model.pairs else None, None, 0)
    scores = linear.scores([example])
    if not np.isfinite(scores).all():
        raise SelfTestFailed(f"the linear model's scores for {SELF_TEST_TEXT!r} are not finite")
    return {"text": SELF_TEST_TEXT, "prediction": linear.model.describe(scores)[0], "passed": True}
