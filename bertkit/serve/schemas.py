"""Request and response bodies of the HTTP API: what /openapi.json publishes.

Unknown fields are refused (422 naming them) so that a typo such as "normalise" is not silently ignored;
the OpenAI-compatible body also accepts the fields OpenAI's clients send.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from bertkit.serve.runner import SERVED_POOLINGS

PoolingName = Literal[SERVED_POOLINGS]  # type: ignore[valid-type]
EncodingFormat = Literal["float", "base64"]
# An echoed id past 64 bits: the response encoder cannot write it (a filter value past 64 bits is the store's to refuse)
Int64 = Annotated[int, Field(ge=-2**63, le=2**63 - 1)]
FilterScalar = Union[str, int, float, bool, None]

TRUNCATE_DOC = ("cut texts longer than the model's limit (special tokens included) and list their indices in "
                "`truncated`; when false such texts are refused with 422 naming them")
EMPTY_DOC = "an empty or whitespace-only text is refused with 422 naming its index"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EncodeRequest(Strict):
    id: Union[Int64, str, None] = Field(None, description="echoed back, as in bert-as-service")
    texts: list[Union[str, list[str]]] = Field(
        ..., description='texts to embed; "first ||| second" is a sentence pair; with is_tokenized, lists of '
                         f"WordPiece tokens. {EMPTY_DOC}.")
    is_tokenized: bool = False
    pooling: Optional[PoolingName] = Field(None, description="default: the model's saved pooling, else mean")
    normalize: Optional[bool] = Field(None, description="L2-normalize (default: the model's saved setting)")
    truncate: bool = Field(False, description=TRUNCATE_DOC)
    encoding_format: EncodingFormat = Field(
        "float", description="base64: each vector as base64 of little-endian float32 (compact, exact)")


class EncodeResponse(BaseModel):
    id: Union[int, str, None]
    results: list[Union[list[float], str]]
    status: int = 200
    truncated: list[int] = Field(default_factory=list, description="indices of texts that were cut")
    dimension: int
    tokens: int = Field(..., description="tokens encoded, special tokens included")


class EmbeddingsRequest(Strict):
    input: Union[str, list[str], list[int], list[list[int]]] = Field(
        ..., description=f"a text, texts, or token-id lists of this model's vocabulary. {EMPTY_DOC}.")
    model: Optional[str] = Field(None, description="ignored: the server serves one model")
    encoding_format: EncodingFormat = "float"
    dimensions: Optional[int] = Field(
        None, ge=1, description="Matryoshka-style: keep the first N components and L2-normalize again; at most "
                                "the model's dimension (GET /status model.dimension), which is the default")
    user: Optional[str] = None
    truncate: bool = Field(False, description=TRUNCATE_DOC)


class EmbeddingItem(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str]


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: EmbeddingsUsage


class TokenizeRequest(Strict):
    texts: list[str] = Field(..., description='texts; "first ||| second" is a pair. Nothing is truncated: '
                                              "over_limit says which texts the model would refuse")


class TokenizeResponse(BaseModel):
    tokens: list[list[str]]
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    offsets: list[list[tuple[int, int]]]
    num_tokens: list[int]
    over_limit: list[bool]
    max_length: int


class QuestionInput(Strict):
    question: str = Field(..., description="the question (not empty); cut to the model's question limit only "
                                           "with truncate: true")
    context: str = Field(..., description="the text to find the answer in (not empty), any length: a long one "
                                          "is read in overlapping windows")


class PredictRequest(Strict):
    texts: list[Union[str, QuestionInput]] = Field(
        ..., description='texts ("first ||| second" for pair tasks). For a question-answering model: '
                         '{"question", "context"} objects, or "question ||| context" strings (both sides '
                         f"stripped); an empty question or context is refused with 422 naming its index. {EMPTY_DOC}.")
    truncate: bool = Field(False, description=TRUNCATE_DOC + "; for QA it applies to questions only (contexts "
                                                             "are never cut)")


class Answer(BaseModel):
    """One /predict result of a question-answering model."""
    answer: str = Field(..., description='the answer, context[start:end]; "" when there is none')
    start: Optional[int] = Field(..., description="character offset of the answer in the context; null when "
                                                  "there is no answer")
    end: Optional[int] = Field(..., description="character offset just past the answer; null when there is none")
    score: Optional[float] = Field(..., description="start + end logit of the answer span (a logit sum, not a "
                                                    "probability); null when no span was valid")
    null_score: float = Field(..., description="start + end logit of [CLS], the no-answer score: a model trained "
                                               "with unanswerable questions (SQuAD v2.0) answers \"\" when it beats "
                                               "score by more than its null_threshold")


class PredictResponse(BaseModel):
    task: str
    predictions: list[Union[Answer, dict[str, Any]]] = Field(
        ..., description="per text, as bertkit predict writes it: {label, score, scores} for classification, "
                         "{labels, scores} for multi-label (labels: probability > 0.5), {score} for regression, "
                         "{tokens, tags, entities: [{type, start_word, end_word, text, start, end, score}]} "
                         "for NER (one tag per word), "
                         "{answer, start, end, score, null_score} (Answer) for question answering")
    truncated: list[int] = Field(default_factory=list, description="indices of texts (QA: questions) that were cut")


class SearchRequest(Strict):
    query: str = Field(..., description="the query text (not empty; cut to the model's limit if longer, "
                                        "and then query_truncated is true)")
    k: Optional[int] = Field(None, ge=1, description="number of results (default 10); at most the server's "
                                                     "search_k_limit")
    filter: Optional[dict[str, Union[FilterScalar, list[FilterScalar]]]] = Field(
        None, description="keep documents whose metadata field equals the value (or one of the listed values)")


class SearchResult(BaseModel):
    id: str
    score: float
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class SearchResponse(BaseModel):
    query: str
    query_truncated: bool = Field(False, description="the query was longer than the model's limit and was cut")
    results: list[SearchResult]


class SimilarityInputs(Strict):
    source_sentence: str = Field(..., description=f"the text the others are compared with. {EMPTY_DOC}.")
    sentences: list[str] = Field(..., description=f"texts to compare with source_sentence. {EMPTY_DOC}.")


class SimilarityRequest(Strict):
    """As Text Embeddings Inference's /similarity."""
    inputs: SimilarityInputs
    truncate: bool = Field(False, description=TRUNCATE_DOC)


class RerankRequest(Strict):
    """As Text Embeddings Inference's /rerank."""
    query: str = Field(..., description="the query (not empty)")
    texts: list[str] = Field(..., description=f"texts to score against the query. {EMPTY_DOC}.")
    return_text: bool = Field(False, description="echo each text in its result")
    raw_scores: bool = Field(False, description="the relevance logit instead of its probability")
    truncate: bool = Field(False, description="cut pairs over the model's limit (the longer side first) instead "
                                              "of refusing them with 422")


class RerankResult(BaseModel):
    index: int = Field(..., description="position of the text in the request")
    score: float = Field(..., description="probability that the text answers the query (raw_scores: the logit)")
    text: Optional[str] = None


class ErrorResponse(BaseModel):
    detail: str


class HealthResponse(BaseModel):
    status: Literal["ok", "unhealthy"] = "ok"
    detail: Optional[str] = Field(None, description="with unhealthy (HTTP 503): what cannot answer and why")
