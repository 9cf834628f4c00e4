"""What the endpoints do, without HTTP: check limits, prepare inputs, queue them, shape the results.

Failures are exceptions with a status attached (`ServiceError`); app.py turns them into JSON responses.
Large requests are tokenized in a thread too (one may carry megabytes of text); the model never runs on
the event loop.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional, Sequence

import numpy as np

from bertkit.data.squad import QAExample
from bertkit.errors import BertkitError, TimeLimitExceeded
from bertkit.features import window_stride
from bertkit.serve.batching import Batcher, QueueFull, batch_overhead_tokens
from bertkit.serve.config import ServeConfig
from bertkit.serve.inputs import (InputRejected, PreparedTexts, TokenSequence, prepare_pairs, prepare_texts,
                                  prepare_windows)
from bertkit.serve.metrics import render
from bertkit.serve.ranking import ranked, relevance, relevant_label, rerank_problem
from bertkit.serve.predictions import (describe_answers, describe_sequence, named_entities, prepare_entities,
                                       prepare_questions, qa_examples, question_answering, sequence_cut)
from bertkit.finetune.ner import TooManyWindows
from bertkit.finetune.tasks import HEAD_TASKS
from bertkit.serve.runner import SERVED_POOLINGS, EmbedItem, ModelRunner, NonFiniteResult
from bertkit.serve.search import SearchIndex
from bertkit.serve.stats import ServerStats

LOG = logging.getLogger("bertkit.serve")
DEFAULT_SEARCH_K = 10
PREDICT_TASKS = HEAD_TASKS      # tasks whose /predict texts may use the whole position table
# Up to this many characters a request is tokenized on the event loop (tens of microseconds in the Rust
# tokenizer); larger ones go to a thread so that one big request cannot stall everyone's I/O.
INLINE_TOKENIZE_CHARS = 4096
# Up to this many QA windows the answers are decoded on the event loop; more go to a thread (the n-best
# search is a Python loop over every window).
INLINE_DECODE_WINDOWS = 16


def _chars(item) -> int:
    if isinstance(item, str):
        return len(item)
    if isinstance(item, QAExample):
        return len(item.question) + len(item.context)
    return 8 * len(item)      # a token or token-id list


def _size(items: Sequence) -> int:
    return sum(_chars(item) for item in items)


class ServiceError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class EmbeddingService:
    def __init__(self, config: ServeConfig, runner: ModelRunner, index: Optional[SearchIndex] = None,
                 model_name: str = "bertkit"):
        self.config, self.runner, self.index, self.model_name = config, runner, index, model_name
        self.stats = ServerStats()
        self.self_test = runner.self_test()
        longest = runner.position_limit if runner.task in PREDICT_TASKS else runner.max_length
        if config.max_batch_tokens < longest:
            raise BertkitError(f"serve: --max-batch-tokens {config.max_batch_tokens} is below the model's "
                               f"{longest}-token limit, so a long text would fit no batch; raise it")
        overhead = config.batch_overhead_tokens or batch_overhead_tokens(
            runner.device.type, getattr(runner.model, "precision", "fp32"))
        self.qa_task = question_answering(runner)
        self.ner_task = named_entities(runner)
        self.sequence_cut = sequence_cut(runner)     # (tokens per row, head+tail) of /predict and /rerank
        self.batcher = Batcher(runner.run_batch, config.max_batch_tokens, config.max_queued_texts,
                               config.workers, config.max_batch_size, overhead, runner.packed_kinds,
                               runner.clocks)

    @property
    def can_predict(self) -> bool:
        return self.runner.head is not None or self.qa_task is not None

    @property
    def task(self) -> Optional[str]:
        return self.runner.task

    def require_encoder(self) -> None:
        """Raise ServiceError when the model has no encoder (a TF-IDF folder: linear.py); here it always has."""

    def close(self) -> None:
        self.batcher.close()
        self.runner.close()
        if self.index is not None:
            self.index.close()

    # --- limits ------------------------------------------------------------------------------------------
    def check_count(self, count: int, field: str = "texts") -> None:
        limit = self.config.max_request_texts
        if count > limit:
            raise ServiceError(413, f"{field} has {count} items; this server accepts at most {limit} per "
                                    f"request (max_request_texts in GET /status); split the request")
        if count == 0:
            raise ServiceError(422, f"{field} is empty; send at least one text")

    async def prepare(self, function, items: Sequence, *args, **kwargs) -> PreparedTexts:
        """Tokenize in a thread, except small requests: for them the thread hop costs more than the work."""
        try:
            if _size(items) <= INLINE_TOKENIZE_CHARS:
                return function(self.runner.tokenizer, items, *args, **kwargs)
            return await asyncio.to_thread(function, self.runner.tokenizer, items, *args, **kwargs)
        except InputRejected as rejected:
            raise ServiceError(422, str(rejected)) from None

    async def _queue(self, kind: str, payloads: Sequence[Any], lengths: Sequence[int]) -> list:
        try:
            return await self.batcher.submit(kind, lengths, payloads, self.config.request_timeout_s)
        except QueueFull as full:
            self.stats.rejected_busy += 1
            raise ServiceError(503, f"server busy: {full}; retry shortly", {"Retry-After": "1"}) from None
        except asyncio.TimeoutError:
            self.stats.timeouts += 1
            raise ServiceError(503, f"timed out after {self.config.request_timeout_s:g} s waiting for the model "
                                    f"({self.batcher.queued} texts queued, {self.batcher.in_progress} being "
                                    "encoded); retry, or send fewer texts", {"Retry-After": "1"}) from None
        except Exception as error:  # noqa: BLE001 - the model failed on a batch (out of memory, say)
            self.stats.model_errors += 1
            if isinstance(error, BertkitError):        # already one line (the model process died, say)
                LOG.error("the model failed on a batch: %s", error)
            else:
                LOG.exception("the model failed on a batch")
            raise ServiceError(503, f"the model failed on this request's batch ({type(error).__name__}: {error}); "
                                    "retry, or send fewer or shorter texts", {"Retry-After": "1"}) from None

    # --- embeddings --------------------------------------------------------------------------------------
    async def embed(self, prepared: PreparedTexts, pooling: Optional[str],
                    normalize: Optional[bool]) -> tuple[np.ndarray, list[int], int]:
        """(vectors (N, dim) float32, indices of truncated texts, tokens encoded)."""
        pooling = pooling or self.runner.default_pooling
        normalize = self.runner.default_normalize if normalize is None else normalize
        problem = self.runner.embedding_problem(pooling, normalize)
        if problem:
            raise ServiceError(422, problem)
        items = [EmbedItem(seq, pooling, normalize) for seq in prepared.sequences]
        lengths = [len(seq.input_ids) for seq in prepared.sequences]
        results = await self._queue("embed", items, lengths)
        bad = [i for i, r in enumerate(results) if isinstance(r, NonFiniteResult)]
        if bad:
            self.stats.non_finite += len(bad)
            raise ServiceError(422, f"the model produced a non-finite vector for texts {bad[:5]}; no vectors "
                                    "are returned for this request (the checkpoint may be damaged)")
        tokens = sum(lengths)
        self.stats.texts += len(items)
        self.stats.tokens += tokens
        self.stats.truncated += len(prepared.truncated)
        return np.stack(results), prepared.truncated, tokens

    async def embed_texts(self, texts: list[str], pooling: Optional[str], normalize: Optional[bool],
                          truncate: bool, field: str = "texts", allow_pairs: bool = True,
                          max_length: Optional[int] = None):
        self.check_count(len(texts), field)
        prepared = await self.prepare(prepare_texts, texts, max_length or self.runner.max_length, truncate,
                                      field=field, allow_pairs=allow_pairs and self.runner.pairs)
        return await self.embed(prepared, pooling, normalize)

    # --- fine-tuned heads --------------------------------------------------------------------------------
    async def _head_outputs(self, kind: str, sequences: list[TokenSequence], texts: int) -> list[np.ndarray]:
        """Head outputs per sequence through the batcher; 422 when any is non-finite."""
        outputs = await self._queue(kind, sequences, [len(seq.input_ids) for seq in sequences])
        if any(isinstance(o, NonFiniteResult) for o in outputs):
            self.stats.non_finite += 1
            raise ServiceError(422, "the model produced non-finite scores for this request; the checkpoint "
                                    "may be damaged")
        self.stats.texts += texts
        return outputs

    async def predict(self, texts: list, truncate: bool) -> tuple[list[dict], list[int]]:
        """texts: strings, or for QA also question/context items (anything with .question and .context)."""
        if self.qa_task is not None:
            return await self.answer(texts, truncate)
        if self.runner.head is None:
            raise ServiceError(409, "this model has no fine-tuned head to predict with (bertkit.json task: "
                                    f"{self.runner.task!r}); serve a folder saved by `bertkit finetune` with "
                                    "a classification, regression, NER or QA head, or use /encode for vectors")
        self.check_count(len(texts))
        objects = [i for i, text in enumerate(texts) if not isinstance(text, str)]
        if objects:
            raise ServiceError(422, f"texts[{objects[0]}] is a question/context object, but this model was "
                                    f"fine-tuned for {self.runner.task!r}, not question answering; send texts")
        if self.ner_task is not None:
            return await self.entities(texts), []
        length, head_and_tail = self.sequence_cut
        prepared = await self.prepare(prepare_texts, texts, length, truncate, head_and_tail=head_and_tail,
                                      allow_pairs=self.runner.pairs)
        outputs = await self._head_outputs("predict", prepared.sequences, len(texts))
        return [describe_sequence(o, self.runner.task, self.runner.label_names) for o in outputs], prepared.truncated

    async def entities(self, texts: list[str]) -> list[dict]:
        """NER as `bertkit predict` tags raw texts: words, long texts in overlapping windows (none refused or
        cut), every window through the batcher as one item, one tag per word."""
        try:       # more windows than the queue holds would be "busy" forever: say what to change
            prepared = await self.prepare(prepare_entities, texts, self.ner_task, self.config.max_queued_texts)
        except TooManyWindows as many:
            raise ServiceError(413, f"the texts of this request make {many.windows} windows of up to "
                                    f"{self.ner_task.max_length} tokens, more than this server queues at once "
                                    f"(max_queued_texts {self.config.max_queued_texts} in GET /status); send "
                                    "shorter or fewer texts per request") from None
        windows = [TokenSequence(f.input_ids, f.token_type_ids) for f in prepared.features]
        outputs = await self._head_outputs("predict", windows, len(texts))
        return self.ner_task.describe(prepared.features, outputs, prepared.sentences, prepared.spans, texts)

    async def rerank(self, query: str, texts: list[str], truncate: bool, raw_scores: bool,
                     return_text: bool) -> list[dict]:
        """TEI's /rerank: every (query, text) pair through the cross-encoder head, best first."""
        outputs = getattr(self.runner.head, "num_labels", None)
        problem = rerank_problem(self.runner.task if self.runner.head is not None else None, outputs)
        if problem is not None:
            raise ServiceError(409, problem)
        self.check_count(len(texts))
        # pairs are cut (longest first) at the length the cross-encoder was fine-tuned with, as its predict does
        prepared = await self.prepare(prepare_pairs, texts, query, self.sequence_cut[0], truncate)
        logits = await self._head_outputs("predict", prepared.sequences, len(texts))
        relevant = relevant_label(self.runner.label_names, outputs)
        return ranked([relevance(row, relevant) for row in logits], texts, raw_scores, return_text)

    async def similarity(self, source: str, sentences: list[str], truncate: bool) -> list[float]:
        """TEI's /similarity: cosine of the source sentence with each sentence, in request order."""
        self.check_count(len(sentences), "inputs.sentences")
        length = self.runner.max_length
        source_part = await self.prepare(prepare_texts, [source], length, truncate, field="inputs.source_sentence",
                                         allow_pairs=False)
        others = await self.prepare(prepare_texts, sentences, length, truncate, field="inputs.sentences",
                                    allow_pairs=False)
        both = PreparedTexts(source_part.sequences + others.sequences, source_part.truncated)
        vectors, _, _ = await self.embed(both, None, True)
        return [float(v) for v in vectors[1:] @ vectors[0]]

    def metrics(self) -> str:
        runner = self.runner
        info = {"model": self.model_name, "task": runner.task or "embedding", "dimension": runner.dimension,
                "device": str(runner.device), "precision": getattr(runner.model, "precision", "fp32")}
        return render(self.stats, self.batcher.snapshot(), info)

    async def answer(self, texts: list, truncate: bool) -> tuple[list[dict], list[int]]:
        """Extractive QA: every document-stride window of every context goes through the batcher as one item,
        so long contexts are batched with everyone else's texts; answers come back per item."""
        self.check_count(len(texts))
        try:
            examples = qa_examples(texts)
        except InputRejected as rejected:
            raise ServiceError(422, str(rejected)) from None
        prepared = await self.prepare(prepare_questions, examples, self.qa_task, truncate)
        windows = [TokenSequence(f.input_ids, f.token_type_ids) for f in prepared.features]
        if len(windows) > self.config.max_queued_texts:   # it would get "busy" forever: say what to change
            raise ServiceError(413, f"the contexts of this request make {len(windows)} windows of up to "
                                    f"{self.qa_task.max_length} tokens, more than this server queues at once "
                                    f"(max_queued_texts {self.config.max_queued_texts} in GET /status); send "
                                    "shorter contexts or fewer questions per request")
        outputs = await self._head_outputs("qa", windows, len(examples))
        if len(windows) <= INLINE_DECODE_WINDOWS:
            answers = describe_answers(self.qa_task, prepared, outputs)
        else:
            answers = await asyncio.to_thread(describe_answers, self.qa_task, prepared, outputs)
        return answers, prepared.truncated

    # --- search ------------------------------------------------------------------------------------------
    async def search(self, query: str, k: Optional[int], filter: Optional[dict]) -> tuple[list, bool]:
        """(hits, whether the query was cut to the model's limit)."""
        if self.index is None:
            raise ServiceError(404, "no search index is loaded; start the server with --index DIR "
                                    "(an index built by `bertkit index` with this model)")
        k = k if k is not None else min(DEFAULT_SEARCH_K, self.config.search_k_limit)
        if k > self.config.search_k_limit:
            raise ServiceError(413, f"k={k} is over this server's limit of {self.config.search_k_limit} "
                                    "(search_k_limit in GET /status)")
        try:
            await self.index.follow_folder()     # a generation saved while the server runs answers from now on
        except TimeLimitExceeded as err:
            raise self._search_timed_out(err) from None
        # as the index encodes its documents (search/encoding.py): its pooling, length and long-text rule,
        # no normalization
        if self.index.long_texts == "sliding-window":
            vectors, truncated = await self._embed_windows(query), []
        else:
            vectors, truncated, _ = await self.embed_texts([query], self.index.pooling, False, truncate=True,
                                                           field="query", allow_pairs=False,
                                                           max_length=self.index.max_length)
        try:
            return await self.index.search(vectors[0], k, filter), bool(truncated)
        except TimeLimitExceeded as err:
            raise self._search_timed_out(err) from None
        except BertkitError as err:   # a bad filter field, for one
            raise ServiceError(422, str(err)) from None

    async def _embed_windows(self, query: str) -> np.ndarray:
        """(1, dim): the mean of the query's window vectors, as features.encode_texts averages them."""
        max_length = self.index.max_length or self.runner.max_length
        try:
            stride = window_stride(max_length, self.index.stride)
        except BertkitError as err:
            raise ServiceError(422, f"index {self.index.folder}: {err}") from None
        prepared = await self.prepare(prepare_windows, [query], max_length, stride)
        self.check_count(len(prepared.sequences), "query (in sliding windows)")
        vectors, _, _ = await self.embed(prepared, self.index.pooling, False)
        return vectors.astype(np.float64).mean(axis=0, keepdims=True).astype(np.float32)

    def _search_timed_out(self, err: TimeLimitExceeded) -> "ServiceError":
        self.stats.timeouts += 1
        return ServiceError(503, f"{err}; retry shortly", {"Retry-After": "1"})

    def health_problem(self) -> Optional[str]:
        """Why this server cannot answer every route now (for /health), or None when it can."""
        problem = self.runner.health_problem() if self.runner is not None else None
        if problem is not None:
            return problem
        stuck = self.index.stuck_for() if self.index is not None else None
        if stuck is not None:
            return (f"the search thread has run one query {stuck:.0f} s past its {self.index.timeout_s:g} s "
                    "limit; /search requests time out until it finishes")
        return None

    # --- status ------------------------------------------------------------------------------------------
    def status(self) -> dict:
        runner, batcher = self.runner, self.batcher.stats
        config = self.config
        return {
            "model": {"name": self.model_name, "dimension": runner.dimension, "max_length": runner.max_length,
                      "default_pooling": runner.default_pooling, "default_normalize": runner.default_normalize,
                      "poolings": list(SERVED_POOLINGS), "task": runner.task,
                      "labels": runner.label_names, "predict": self.can_predict,
                      "device": str(runner.device), "precision": getattr(runner.model, "precision", "fp32"),
                      "backend": runner.backend()},
            "limits": {"max_request_texts": config.max_request_texts,
                       "max_tokens_per_text": runner.max_length,
                       "max_batch_tokens": config.max_batch_tokens,
                       "max_batch_size": config.max_batch_size,
                       "max_request_bytes": config.max_request_bytes,
                       "max_queued_texts": config.max_queued_texts,
                       "request_timeout_s": config.request_timeout_s,
                       "search_k_limit": config.search_k_limit,
                       "header_timeout_s": config.header_timeout_s, "body_timeout_s": config.body_timeout_s,
                       "keep_alive_timeout_s": config.keep_alive_timeout_s,
                       "max_connections": config.max_connections, "max_header_bytes": config.max_header_bytes},
            "config": config.public_dict(),
            "self_test": self.self_test,
            "index": self.index.describe() if self.index is not None else None,
            "queue": {"queued_texts": self.batcher.queued, "batches": batcher.batches,
                      "mean_batch_size": round(batcher.items / batcher.batches, 2) if batcher.batches else 0.0,
                      "padding_efficiency": round(batcher.real_tokens / batcher.padded_tokens, 3)
                      if batcher.padded_tokens else None,
                      "model_busy_s": round(batcher.busy_seconds, 3), "model_cpu_s": round(batcher.cpu_seconds, 3),
                      "batch_overhead_tokens": self.batcher.batch_overhead_tokens},
            "counters": self.stats.as_dict(),
            "latency": self.stats.latency(),
        }
