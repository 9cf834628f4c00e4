"""An HF tokenizer.json, read once per load: its text (handed to the Rust loader as is) and its JSON state (which
model it holds, its normalizer), so that choosing the tokenizer kind and building it never parse the file again."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tokenizers import Tokenizer as RustTokenizer

from bertkit.errors import CheckpointError

FILE = "tokenizer.json"


@dataclass(frozen=True)
class TokenizerJson:
    path: Path
    text: str
    state: dict

    @property
    def model_type(self) -> Optional[str]:
        """"WordPiece", "BPE", "Unigram", ... (the state's model.type), or None when it names none."""
        model = self.state.get("model")
        return model.get("type") if isinstance(model, dict) else None

    def backend(self) -> RustTokenizer:
        try:
            return RustTokenizer.from_str(self.text)
        except Exception as err:  # the Rust loader raises a bare Exception
            raise CheckpointError(f"{self.path}: cannot be read ({err})") from None


def read_tokenizer_json(path: str | Path) -> TokenizerJson:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        state = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: cannot read tokenizer.json ({err})") from None
    return TokenizerJson(path, text, state if isinstance(state, dict) else {})


def folder_tokenizer_json(folder: Path) -> Optional[TokenizerJson]:
    """The folder's tokenizer.json, read, or None when it has none."""
    return read_tokenizer_json(folder / FILE) if (folder / FILE).is_file() else None
