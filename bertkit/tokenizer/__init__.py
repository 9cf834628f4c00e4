"""BERT WordPiece tokenization over the Rust `tokenizers` library, and vocabulary training."""
from bertkit.tokenizer.encoding import BatchEncoding, TextTooLongError, WindowedEncoding
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.tokenizer.tokenizer import Tokenizer
from bertkit.tokenizer.train import train_wordpiece

__all__ = ["BatchEncoding", "TextTooLongError", "Tokenizer", "WindowedEncoding", "pad_to_tensors",
           "train_wordpiece"]
