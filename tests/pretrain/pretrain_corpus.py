"""A tiny corpus and WordPiece vocabulary made in code, for the pre-training and shard tests."""
import random
from pathlib import Path

from bertkit.tokenizer import Tokenizer

WORDS = ("the cat sat on a mat dog ran far away big small red blue green house tree river mountain city "
         "walking talked quickly").split()


def write_corpus(path: Path, documents: int = 40, seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        for _ in range(rng.randint(2, 5)):
            first = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))).capitalize()
            lines.append(f"{first}. {' '.join(rng.choice(WORDS) for _ in range(5))}!")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def make_tokenizer() -> Tokenizer:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!", "?", "。", "，"]
    vocab += sorted(set(WORDS) - {"walking", "talked", "quickly"}) + ["walk", "##ing", "talk", "##ed", "quick", "##ly"]
    vocab += list("我们去公园今天气很好是中国人")
    return Tokenizer.from_vocab({t: i for i, t in enumerate(vocab)}, lowercase=True)
