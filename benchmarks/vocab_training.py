"""Vocabulary training: bertkit.train_wordpiece against the plain `tokenizers` WordPiece trainer (what bertkit
ran before it fixed the alphabet and the "##x" ids), same corpus, same settings, interleaved rounds.

    python benchmarks/vocab_training.py --corpus ../shared/data/en_corpus.txt.gz --vocab-size 30522 --rounds 3
    python benchmarks/vocab_training.py --corpus ../shared/data/zh_corpus.txt.gz --vocab-size 21128 --rounds 3

Reports per trainer: distinct vocab.txt files over the rounds (1 = reproducible), median seconds, and how alike
the two vocabularies are (shared tokens) and how well they cut held-out text (tokens per word, [UNK] rate), so
the price of reproducibility (one extra pass that counts characters) stands beside what it changes.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer as RustTokenizer, pre_tokenizers
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from bertkit.tokenizer import Tokenizer, train_wordpiece
from bertkit.tokenizer.train import LINES_PER_BATCH
from bertkit.tokenizer.wordpiece import SPECIAL_TOKENS, UNK, bert_normalizer


def plain_trainer(path: Path, vocab_size: int) -> Tokenizer:
    """train_wordpiece as it was: the Rust trainer with bertkit's settings and nothing fixed in advance."""
    backend = RustTokenizer(WordPiece(unk_token=UNK))
    backend.normalizer = bert_normalizer(True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    reserved = [*SPECIAL_TOKENS, *(f"[unused{i}]" for i in range(100))]
    trainer = WordPieceTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=reserved,
                               limit_alphabet=max(1000, vocab_size // 4), continuing_subword_prefix="##",
                               show_progress=False)
    with open(path, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    backend.train_from_iterator((lines[i:i + LINES_PER_BATCH] for i in range(0, len(lines), LINES_PER_BATCH)),
                                trainer=trainer)
    return Tokenizer.from_vocab(backend.get_vocab(), True)


def vocab_bytes(tokenizer: Tokenizer) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save(folder)
        return (Path(folder) / "vocab.txt").read_bytes()


def cut_quality(tokenizer: Tokenizer, texts: list[str]) -> tuple[float, float]:
    """(tokens per whitespace word, [UNK] rate) on held-out texts."""
    batch = tokenizer.encode_batch(texts, max_length=None)
    words = sum(len(t.split()) for t in texts)
    return (sum(len(ids) - 2 for ids in batch.input_ids) / max(words, 1), tokenizer.unk_rate(batch))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heldout", type=int, default=2000, help="last N lines, kept out of training")
    args = parser.parse_args()

    opener = gzip.open if args.corpus.endswith(".gz") else open
    with opener(args.corpus, "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    train, heldout = lines[:-args.heldout], lines[-args.heldout:]
    work = Path(tempfile.mkdtemp())
    corpus = work / "train.txt"
    corpus.write_text("\n".join(train) + "\n", encoding="utf-8")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")
    print(f"CPU: {model} ({platform.machine()}); corpus {args.corpus}: {len(train)} training lines, "
          f"{len(heldout)} held out; vocab {args.vocab_size}")

    trainers = {"tokenizers WordPieceTrainer (before)": lambda: plain_trainer(corpus, args.vocab_size),
                "bertkit train_wordpiece": lambda: train_wordpiece([corpus], vocab_size=args.vocab_size)}
    seconds: dict[str, list[float]] = {name: [] for name in trainers}
    files: dict[str, list[bytes]] = {name: [] for name in trainers}
    last: dict[str, Tokenizer] = {}
    for _ in range(args.rounds):                       # interleaved: load changes hit both alike
        for name, train_once in trainers.items():
            start = time.perf_counter()
            last[name] = train_once()
            seconds[name].append(time.perf_counter() - start)
            files[name].append(vocab_bytes(last[name]))
    print(f"| trainer | distinct vocab.txt in {args.rounds} runs | median s | tokens/word | [UNK] rate |")
    print("|---|---:|---:|---:|---:|")
    for name in trainers:
        per_word, unk = cut_quality(last[name], heldout)
        distinct = len({hashlib.sha256(b).hexdigest() for b in files[name]})
        print(f"| {name} | {distinct} | {statistics.median(seconds[name]):.1f} | {per_word:.3f} | {unk:.4%} |")
    before, after = (set(last[name].backend.get_vocab()) for name in trainers)
    print(f"tokens shared by the two vocabularies: {len(before & after)} of {len(after)} "
          f"({len(after - before)} only in bertkit's, {len(before - after)} only in the plain trainer's)")


if __name__ == "__main__":
    main()
