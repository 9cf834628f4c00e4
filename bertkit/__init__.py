"""bertkit: tokenizers, BERT-family encoders, pre-training, fine-tuning, embeddings, search and serving.

The top-level names are imported on first use, so `import bertkit.model` stays light.
"""
__version__ = "0.1.0"
__all__ = ["Client", "Index", "Model", "convert", "load", "__version__"]


def __getattr__(name: str):
    if name in ("Index", "Model", "convert", "load"):
        from bertkit import api
        return getattr(api, name)
    if name == "Client":
        from bertkit.client import Client
        return Client
    raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
