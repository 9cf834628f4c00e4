"""The README's usage section, command by command (issue 17's acceptance): each `bertkit ...` line of the
"Using it" bash block runs on tiny data, exits 0, and writes what it names (`--output`, `--index`, convert's
DST_DIR). The commands are taken from the README itself: optional `[...]` parts are dropped, placeholders
(DIR, FILE, "...") become tiny folders and files through the small mappings below, and EXTRA adds only what
keeps a step to seconds (steps, epochs). Commands are run in README order in one folder, so `runs/bert` from
`pretrain` is the model `evaluate-mlm`, seq2seq and PET then use, as a reader would chain them.

Skipped, by name: SKIPPED below (with the test that covers each)."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.cli import main
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the a cat dog sat ran on mat big house king went to city it was great terrible is "
         "new old red blue song bird tree").split()
SKIPPED = {"serve": "runs until interrupted; tests/serve/ start it on tiny models"}
# placeholder -> value, per command (first word after bertkit) where it differs from the default
PLACEHOLDERS = {"SRC_DIR": "DIR", "DST_DIR": "converted", '"..."': "the cat sat on the mat"}
MODEL_OF = {"distill": "runs/cls", "quantize": "runs/cls", "prune-heads": "runs/cls", "generate": "runs/gpt"}
OUTPUT_OF = {"distill": "distilled"}
FAST = ["--progress_bar=false"]
EXTRA = {   # (command, --task or --arch or subcommand) -> flags that keep it to seconds
    "pretrain": ["--max-steps", "2", "--data.max_length=32", "--data.batch_size=8", "--train.progress_bar=false"],
    "finetune": ["--epochs", "1", "--batch-size", "8", "--max-length", "32", *FAST],
    "simcse": ["--max-steps", "2", "--batch-size", "8", *FAST],
    "distill": ["--epochs", "1", "--batch-size", "8", "--max-length", "32", *FAST],
    "vocab": ["--vocab-size", "200"],
    "generate": ["--max-new-tokens", "4"],
}


def usage_commands() -> list[list[str]]:
    """The bertkit commands of the README's "Using it" bash block, as argv lists (without "bertkit")."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using it", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    lines: list[str] = []
    for raw in block.splitlines():
        line = re.sub(r"\s+#.*$", "", raw) if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if raw[:1].isspace() and lines:                  # an indented line continues the command above
            lines[-1] = lines[-1].rstrip(" \\") + " " + line.strip()
        else:
            lines.append(line.strip())
    commands = []
    for line in lines:
        for part in line.rstrip(" \\").split(" && "):
            tokens, depth = [], 0
            for token in shlex.split(part):
                if depth == 0 and token.startswith("["):
                    depth = 1
                if depth == 0:
                    tokens.append(token)
                elif token.endswith("]"):
                    depth = 0
            assert tokens[0] == "bertkit", part
            commands.append(tokens[1:])
    return commands


def substitute(argv: list[str]) -> list[str]:
    name, out = argv[0], []
    for i, token in enumerate(argv):
        flag = argv[i - 1] if i else ""
        if token == "DIR" and flag in ("--model", "--teacher") and name in MODEL_OF:
            token = MODEL_OF[name]
        elif token == "DIR" and flag == "--output" and name in OUTPUT_OF:
            token = OUTPUT_OF[name]
        elif token == "FILE":
            token = "dev.jsonl"
        token = PLACEHOLDERS.get(f'"{token}"' if token == "..." else token, token)
        out.append(token)
    if name == "vocab":            # vocab train: a small vocabulary; vocab extend: nothing to shorten
        if "--vocab-size" in out:
            out[out.index("--vocab-size") + 1] = "200"
        return out
    if name == "pretrain" and "gpt" in out:
        return out + ["--max-steps", "2", "--data.block_size=32", "--data.batch_size=8", "--train.progress_bar=false"]
    if "--method" in out:          # a linear model on frozen vectors: no epochs or batches to shorten
        return out
    return out + EXTRA.get(name, [])


def written(argv: list[str]) -> list[str]:
    """What the command says it writes: its --output / --index value, or convert's second folder."""
    if argv[0] == "convert":
        return [argv[2]]
    names = [argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "--output"]
    if argv[:2] == ["index", "build"]:
        names.append(argv[argv.index("--index") + 1])
    return names


def write_data(folder: Path) -> None:
    rng = torch.Generator().manual_seed(0)
    texts = [" ".join(WORDS[j] for j in torch.randint(len(WORDS), (6,), generator=rng).tolist()) for _ in range(240)]
    corpus, texts = texts, texts[:40]
    label = lambda t: "pos" if "great" in t or "cat" in t else "neg"     # noqa: E731
    rows = "".join(json.dumps({"text": t, "label": label(t)}) + "\n" for t in texts)
    for name in ("train.jsonl", "dev.jsonl", "test.jsonl", "few.jsonl", "texts.jsonl"):
        (folder / name).write_text(rows, encoding="utf-8")
    # a pre-training corpus: a blank line between documents; the other .txt inputs: one text per line
    (folder / "corpus.txt").write_text("\n".join(corpus[:120]) + "\n\n" + "\n".join(corpus[120:]) + "\n",
                                       encoding="utf-8")
    for name in ("heldout.txt", "texts.txt", "unlabeled.txt"):
        (folder / name).write_text("\n".join(texts) + "\n", encoding="utf-8")
    (folder / "docs.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"text": t, "relevant": i}) + "\n"
                                                  for i, t in enumerate(texts[:10])))
    (folder / "more.jsonl").write_text("".join(json.dumps({"id": f"m{i}", "text": t}) + "\n"
                                               for i, t in enumerate(texts[:5])))
    (folder / "pairs.jsonl").write_text("".join(json.dumps({"source": a, "target": b}) + "\n"
                                                for a, b in zip(texts, reversed(texts))))
    (folder / "triples.jsonl").write_text("".join(json.dumps({"query": a, "positive": b, "negative": c}) + "\n"
                                                  for a, b, c in zip(texts, texts[1:], texts[2:])))
    torch.manual_seed(0)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(dict.fromkeys(tokens))}, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=4, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    save_checkpoint(folder / "DIR", Encoder(config), tokenizer)


def test_usage_commands_parse_into_the_whole_block():
    commands = usage_commands()
    names = [c[0] for c in commands]
    for name in ("encode", "convert", "pretrain", "finetune", "predict", "whiten", "index", "search", "serve",
                 "distill", "quantize", "export-onnx", "generate", "evaluate-embeddings", "plot-embeddings"):
        assert name in names, name
    assert len(commands) >= 30


@pytest.mark.slow
def test_every_usage_command_runs_and_writes_what_it_names(tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    pytest.importorskip("onnxruntime")
    write_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    ran, skipped = [], []
    for argv in usage_commands():
        if argv[0] in SKIPPED:
            skipped.append(argv[0])
            continue
        argv = substitute(argv)
        assert main(argv) == 0, " ".join(argv)
        for name in written(argv):
            assert (tmp_path / name).exists(), f"bertkit {' '.join(argv)} did not write {name}"
        ran.append(" ".join(argv))
    assert skipped == list(SKIPPED) and len(ran) >= 29
