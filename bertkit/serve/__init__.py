"""The embedding and prediction server (`bertkit serve`): FastAPI + uvicorn, cross-client batching.

`bertkit.serve.server` holds build_service and serve, `bertkit.serve.config` ServeConfig; this package imports
neither, so the command line reads the server's settings without loading torch."""
