"""The HTTP API (FastAPI): routes map requests to EmbeddingService calls and errors to JSON answers.

Every failure is a JSON body {"detail": "..."} with a 4xx status that says what to change: 401 key,
413 over a published limit, 422 invalid input (named by field and index), 404/409 feature not loaded,
503 busy or timed out (with Retry-After). Vectors are serialized straight from numpy, never NaN.
"""
from __future__ import annotations

import base64
import json

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

import bertkit
from bertkit.serve import schemas
from bertkit.serve.guard import GuardMiddleware
from bertkit.serve.inputs import prepare_ids, prepare_texts, prepare_tokens, tokenize_texts
from bertkit.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from bertkit.serve.page import PAGE_HTML
from bertkit.serve.service import EmbeddingService, ServiceError
from bertkit.tokenizer.tokenizer import InvalidTextError

try:  # orjson writes numpy arrays directly, several times faster than json + tolist()
    import orjson
except ImportError:  # pragma: no cover - optional speed-up
    orjson = None

API_DESCRIPTION = """Embeddings, predictions and search from one loaded BERT-family model.

Requests from all clients are queued and run together in length-sorted micro-batches. Limits are in
GET /status (`limits`). Vectors are the model folder's own (its pooling, length limit, dense layers, whitening
and normalization): the same as `Model.encode` and `bertkit encode` give. Input rules: an empty or
whitespace-only text, or one with a lone UTF-16 surrogate, gets 422 naming its index; a text over the model's
token limit gets 422 unless `truncate` is true (then it is cut and listed in `truncated`); `"a ||| b"` is a
sentence pair. With an API key set, every endpoint but /health needs
`Authorization: Bearer KEY` (or `X-API-Key: KEY`)."""

ERRORS = {status: {"model": schemas.ErrorResponse, "description": text} for status, text in (
    (401, "missing or wrong API key"), (408, "request body too slow"), (413, "over a published limit"),
    (422, "invalid input"),
    (503, "busy or timed out; retry after Retry-After seconds"))}


def json_response(content: dict, status: int = 200) -> Response:
    if orjson is not None:
        body = orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
    else:
        body = json.dumps(content, default=lambda a: a.tolist()).encode()
    return Response(body, status_code=status, media_type="application/json")


def format_vectors(vectors: np.ndarray, encoding_format: str):
    if encoding_format == "base64":
        little = vectors.astype("<f4", copy=False)
        return [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    return vectors if orjson is not None else vectors.tolist()


def shorten(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """Matryoshka truncation (Kusupati et al. 2022), as OpenAI's `dimensions`: the first components, unit length."""
    kept = vectors[:, :dimensions]
    norms = np.linalg.norm(kept, axis=1, keepdims=True)
    return (kept / np.maximum(norms, np.finfo(np.float32).tiny)).astype(np.float32)


def _validation_message(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        if item.get("type") == "json_invalid":
            reason = (item.get("ctx") or {}).get("error", "")
            return f"the request body is not valid JSON: {reason} (at character {item['loc'][-1]})"
        where = ".".join(str(p) for p in item.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def create_app(service: EmbeddingService) -> FastAPI:
    app = FastAPI(title="bertkit server", version=getattr(bertkit, "__version__", "unknown"),
                  description=API_DESCRIPTION)
    app.add_middleware(GuardMiddleware, api_key=service.config.api_key,
                       max_request_bytes=service.config.max_request_bytes, stats=service.stats,
                       body_timeout_s=service.config.body_timeout_s,
                       max_header_bytes=service.config.max_header_bytes)
    runner = service.runner

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, error: ServiceError):
        return JSONResponse({"detail": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(InvalidTextError)
    async def invalid_text(request: Request, error: InvalidTextError):
        # routes name the field and index themselves; this catches any other path a text takes to the tokenizer
        return JSONResponse({"detail": str(error)}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError):
        return JSONResponse({"detail": _validation_message(error)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):
        return JSONResponse({"detail": str(error.detail)}, status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    @app.post("/encode", response_model=schemas.EncodeResponse, responses=ERRORS,
              summary="Embed texts (bert-as-service compatible)")
    async def encode(body: schemas.EncodeRequest):
        service.require_encoder()
        service.check_count(len(body.texts))
        if body.is_tokenized:
            strings = [i for i, t in enumerate(body.texts) if isinstance(t, str)]
            if strings:
                raise ServiceError(422, f"texts[{strings[0]}] is a string but is_tokenized is true; send lists "
                                        "of tokens, or is_tokenized: false")
            prepared = await service.prepare(prepare_tokens, body.texts, runner.max_length, body.truncate)
        else:
            lists = [i for i, t in enumerate(body.texts) if not isinstance(t, str)]
            if lists:
                raise ServiceError(422, f"texts[{lists[0]}] is a list of tokens; send is_tokenized: true, or "
                                        "plain strings")
            prepared = await service.prepare(prepare_texts, body.texts, runner.max_length, body.truncate,
                                             allow_pairs=runner.pairs)
        vectors, truncated, tokens = await service.embed(prepared, body.pooling, body.normalize)
        return json_response({"id": body.id, "results": format_vectors(vectors, body.encoding_format),
                              "status": 200, "truncated": truncated, "dimension": int(vectors.shape[1]),
                              "tokens": tokens})

    @app.post("/v1/embeddings", response_model=schemas.EmbeddingsResponse, responses=ERRORS,
              summary="Embed texts (OpenAI-compatible)")
    async def embeddings(body: schemas.EmbeddingsRequest):
        service.require_encoder()
        items = [body.input] if isinstance(body.input, str) else list(body.input)
        if items and all(isinstance(i, int) for i in items):
            items = [items]       # one token-id list
        service.check_count(len(items), "input")
        if body.dimensions is not None and body.dimensions > runner.dimension:
            raise ServiceError(422, f"dimensions={body.dimensions} is more than this model's {runner.dimension}; "
                                    f"send at most {runner.dimension} (or leave it out)")
        if all(isinstance(i, str) for i in items):
            prepared = await service.prepare(prepare_texts, items, runner.max_length, body.truncate, field="input",
                                             allow_pairs=runner.pairs)
        elif all(isinstance(i, list) for i in items):
            prepared = await service.prepare(prepare_ids, items, runner.max_length, body.truncate)
        else:
            raise ServiceError(422, "input mixes texts and token-id lists; send one kind")
        vectors, _, tokens = await service.embed(prepared, None, True)
        if body.dimensions is not None and body.dimensions < runner.dimension:
            vectors = shorten(vectors, body.dimensions)
        data = [{"object": "embedding", "index": i, "embedding": v}
                for i, v in enumerate(format_vectors(vectors, body.encoding_format))]
        return json_response({"object": "list", "data": data, "model": body.model or service.model_name,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    @app.post("/tokenize", response_model=schemas.TokenizeResponse, responses=ERRORS,
              summary="Show the tokens the model sees")
    async def tokenize(body: schemas.TokenizeRequest):
        service.require_encoder()
        service.check_count(len(body.texts))
        rows = await service.prepare(tokenize_texts, body.texts)
        to_token = runner.tokenizer.id_to_token
        return json_response({
            "tokens": [[to_token(i) or "" for i in row.input_ids] for row in rows],
            "input_ids": [row.input_ids for row in rows],
            "token_type_ids": [row.token_type_ids for row in rows],
            "offsets": [row.offsets for row in rows],
            "num_tokens": [len(row.input_ids) for row in rows],
            "over_limit": [len(row.input_ids) > runner.max_length for row in rows],
            "max_length": runner.max_length})

    @app.post("/predict", response_model=schemas.PredictResponse,
              responses={**ERRORS, 409: {"model": schemas.ErrorResponse, "description": "no fine-tuned head"}},
              summary="Labels, values, entities or answers from the model's fine-tuned head")
    async def predict(body: schemas.PredictRequest):
        predictions, truncated = await service.predict(body.texts, body.truncate)
        return json_response({"task": service.task, "predictions": predictions, "truncated": truncated})

    @app.post("/similarity", response_model=list[float], responses=ERRORS,
              summary="Cosine of a source sentence with each sentence (Text Embeddings Inference-compatible)")
    async def similarity(body: schemas.SimilarityRequest):
        scores = await service.similarity(body.inputs.source_sentence, body.inputs.sentences, body.truncate)
        return json_response(scores)

    @app.post("/rerank", response_model=list[schemas.RerankResult], response_model_exclude_none=True,
              responses={**ERRORS, 409: {"model": schemas.ErrorResponse, "description": "not a cross-encoder"}},
              summary="Texts scored against a query by the cross-encoder, best first (TEI-compatible)")
    async def rerank(body: schemas.RerankRequest):
        return json_response(await service.rerank(body.query, body.texts, body.truncate, body.raw_scores,
                                                  body.return_text))

    @app.get("/metrics", response_class=PlainTextResponse, responses={401: ERRORS[401]},
             summary="Prometheus metrics: requests by route and status, batch sizes, queue time, tokens, errors")
    async def metrics():
        return PlainTextResponse(service.metrics(), media_type=METRICS_CONTENT_TYPE)

    @app.post("/search", response_model=schemas.SearchResponse,
              responses={**ERRORS, 404: {"model": schemas.ErrorResponse, "description": "no index loaded"}},
              summary="Nearest documents in the loaded index")
    async def search(body: schemas.SearchRequest):
        if not body.query.strip():
            raise ServiceError(422, "query is empty or whitespace-only; send some text")
        hits, truncated = await service.search(body.query, body.k, body.filter)
        return json_response({"query": body.query, "query_truncated": truncated, "results": [
            {"id": h.id, "score": h.score, "text": h.text, "metadata": h.metadata} for h in hits]})

    @app.get("/health", response_model=schemas.HealthResponse, response_model_exclude_none=True,
             summary="Health (no API key needed)",
             responses={503: {"model": schemas.HealthResponse, "description": "a route cannot answer now"}})
    async def health():
        problem = service.health_problem()
        if problem is not None:
            return JSONResponse({"status": "unhealthy", "detail": problem}, status_code=503)
        return {"status": "ok"}

    @app.get("/status", responses={401: ERRORS[401]},
             summary="Effective config, limits, counters, queue and latency percentiles")
    async def status():
        return json_response(service.status())

    @app.get("/", response_class=HTMLResponse, responses={401: ERRORS[401]},
             summary="A page to try search and similarity")
    async def page():
        return HTMLResponse(PAGE_HTML)

    return app
