import numpy as np
import pytest
import torch

from bertkit.generate import CausalLM, gpt_config
from bertkit.generate.pretrain import (GPTDataConfig, blocks, heldout_perplexity, split_documents,
                                       tokenize_documents, train_causal_lm, unigram_perplexity)
from bertkit.train import TrainConfig

SENTENCES = ["the cat sat on the mat.", "the dog sat on the log.", "a bird sang in the tree."]


def test_documents_become_blocks_with_eos(tmp_path, bpe):
    path = tmp_path / "docs.txt"
    path.write_text("the cat sat.\non the mat.\n\nthe dog sat.\n", encoding="utf-8")
    docs = tokenize_documents(bpe, [path])
    assert len(docs) == 2 and all(d[-1] == bpe.eos_id for d in docs)
    assert bpe.decode(docs[0].tolist()) == "the cat sat.\non the mat."
    stream = np.arange(10)
    assert blocks(stream, 4).tolist() == [[0, 1, 2, 3, 4], [4, 5, 6, 7, 8]]
    train_stream, heldout = split_documents([np.arange(3)] * 10, 0.2)
    assert len(train_stream) == 24 and len(heldout) == 6


def test_tiny_gpt_beats_the_unigram_baseline(tmp_path, bpe):
    path = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    path.write_text("\n\n".join(" ".join(rng.choice(SENTENCES, 3)) for _ in range(30)) + "\n", encoding="utf-8")
    train_stream, heldout = split_documents(tokenize_documents(bpe, [path]), 0.1)
    torch.manual_seed(0)
    model = CausalLM(gpt_config(vocab_size=bpe.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                                max_position_embeddings=32))
    result = train_causal_lm(model, train_stream, heldout, GPTDataConfig(block_size=16, batch_size=8), TrainConfig(
        lr=1e-2, max_steps=30, warmup_steps=3, progress_bar=False, device="cpu", eval_every=30))
    unigram = unigram_perplexity(train_stream, heldout, 16, bpe.vocab_size)
    assert result.last_eval["perplexity"] < unigram / 2
    assert heldout_perplexity(model, heldout, 16)["perplexity"] == pytest.approx(result.last_eval["perplexity"])
