"""bertkit: tokenizers, BERT-family encoders, pre-training, fine-tuning, embeddings, search and serving.

The top-level names are imported on first use, so `import bertkit.model` stays light.
"""
from bertkit.lazy import lazy_exports

__version__ = "0.1.0"
__all__ = ["Client", "Index", "Model", "convert", "load", "__version__"]


__getattr__ = lazy_exports("bertkit", {"Index": "api", "Model": "api", "convert": "api", "load": "api",
                                       "Client": "client"})
