"""The embedding and prediction server (`bertkit serve`): FastAPI + uvicorn, cross-client batching."""
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service, serve

__all__ = ["ServeConfig", "build_service", "serve"]
