"""Semantic search: a vector index (Faiss, or Milvus for scale) with ids, texts and metadata in SQLite."""
from bertkit.search.backend import BackendInfo
from bertkit.search.encoding import EncoderSpec, ModelTextEncoder
from bertkit.search.index import Index, IndexSettings, SearchHit

__all__ = ["BackendInfo", "EncoderSpec", "Index", "IndexSettings", "ModelTextEncoder", "SearchHit"]
