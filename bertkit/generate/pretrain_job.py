"""The GPT pre-training job behind `bertkit pretrain --arch gpt`: corpus -> byte-level BPE (trained on the
corpus unless given) -> one token stream of whole documents -> fixed-length blocks -> the shared training
loop with next-token loss -> an HF GPT-2 folder that `bertkit generate` and transformers.GPT2LMHeadModel load.

A recipe for train/fit.py's fit, as BERT pre-training: the output folder is the model folder (config.json,
model.safetensors, vocab.json, merges.txt, tokenizer.json), saved with every training state, beside fit's run
record (run/: config.effective.json, versions.json, log.jsonl, loss.png, checkpoint/ until the run finishes)
and metrics.json.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bertkit.checkpoints.gpt2 import load_gpt2, save_gpt2
from bertkit.errors import BertkitError
from bertkit.model.causal_lm import CausalLM, causal_lm_loss
from bertkit.generate.pretrain_config import GPTPretrainConfig
from bertkit.generate.pretrain import (block_batches, heldout_evaluation, split_documents,
                                       tokenize_documents, unigram_perplexity)
from bertkit.runtime import init_distributed, pick_device
from bertkit.tokenizer.bpe import BPETokenizer, train_bpe
from bertkit.train import TrainResult
from bertkit.train import distributed as dist_
from bertkit.train.fit import Job, check_pretraining_output, check_resume, fit, fresh_unless_resumed

TOKENIZER_DIR = "tokenizer"


@dataclass
class GPTPretrainResult:
    model_dir: Path
    train: TrainResult
    unigram_perplexity: Optional[float]   # the baseline on the same held-out targets


def _tokenizer(config: GPTPretrainConfig, corpus: Sequence[str], output: Path, vocab: Optional[str], init_tokenizer):
    if vocab is not None:
        given = BPETokenizer.from_folder(vocab)
        if init_tokenizer is not None and given.backend.get_vocab() != init_tokenizer.backend.get_vocab():
            raise BertkitError(f"--vocab {vocab} differs from the vocabulary of --model; drop --vocab to keep the "
                               "checkpoint's tokenizer")
        return given
    if init_tokenizer is not None:
        return init_tokenizer
    saved = output / TOKENIZER_DIR
    fresh_unless_resumed(saved, config.train.resume)    # an earlier run's vocab is for its --resume only
    if not (saved / "tokenizer.json").is_file():
        if dist_.rank() == 0:   # train once, share through the run folder (also what --resume reuses)
            train_bpe(list(corpus), vocab_size=config.vocab.vocab_size,
                      min_frequency=config.vocab.min_frequency).save(saved)
        dist_.barrier()
    return BPETokenizer.from_folder(saved)


def check_shape(config: GPTPretrainConfig, init_positions: Optional[int]) -> None:
    """Settings that cannot work, refused before the (slow) vocabulary training and tokenization."""
    block, shape = config.data.block_size, config.encoder
    if init_positions is not None and block > init_positions:
        raise BertkitError(f"--data.block_size {block} > the {init_positions} positions of --model; lower it")
    if init_positions is None and block > shape.max_position_embeddings:
        raise BertkitError(f"--data.block_size {block} > encoder.max_position_embeddings "
                           f"{shape.max_position_embeddings}; raise the latter or lower the former")
    if init_positions is None and shape.hidden_size % shape.num_heads:
        raise BertkitError(f"encoder.hidden_size {shape.hidden_size} is not a multiple of encoder.num_heads "
                           f"{shape.num_heads}")
    if block < 1 or config.data.batch_size < 1:
        raise BertkitError("--data.block_size and --data.batch_size must be >= 1")


def _model(config: GPTPretrainConfig, vocab_size: int, init_model: Optional[CausalLM]) -> CausalLM:
    if init_model is not None:
        return init_model
    return CausalLM(config.encoder.encoder_config(vocab_size))


def run_gpt_pretraining(config: GPTPretrainConfig, corpus: Sequence[str], output: str | Path,
                        init: Optional[str] = None, vocab: Optional[str] = None) -> GPTPretrainResult:
    """Pre-train a GPT (or continue pre-training the GPT-2 folder `init`) on `corpus`; the model folder is
    `output` itself, saved at every checkpoint and at the end."""
    output = Path(output)
    check_resume(config.train.resume, output)
    if not config.train.resume:
        check_pretraining_output(output, init)
    init_distributed(pick_device(config.train.device))
    checkpoint = load_gpt2(init) if init is not None else None
    check_shape(config, checkpoint.config.max_position_embeddings if checkpoint else None)
    if checkpoint is not None and checkpoint.tokenizer is None:
        raise BertkitError(f"--model {init}: the folder has no tokenizer files (tokenizer.json or vocab.json + "
                           "merges.txt) to keep")
    tokenizer = _tokenizer(config, corpus, output, vocab, checkpoint.tokenizer if checkpoint else None)
    docs = tokenize_documents(tokenizer, corpus, config.data.max_documents)
    seed = config.train.seed
    if config.data.heldout_fraction > 0:
        train_stream, heldout_stream = split_documents(docs, config.data.heldout_fraction, seed)
    else:
        train_stream, heldout_stream = np.concatenate(docs), None
    block = config.data.block_size
    rows = (len(train_stream) - 1) // block
    if rows < config.data.batch_size * dist_.world_size():
        raise BertkitError(f"the corpus gives {rows} training block(s) of {block} tokens, not one full batch of "
                           f"{config.data.batch_size} per process; lower --data.block_size or "
                           "--data.batch_size, or add text")
    if heldout_stream is not None and len(heldout_stream) <= block:
        heldout_stream = None   # too little held-out text for one block: train without evaluation
    unigram = None   # the baseline beside the held-out perplexity, also in metrics.json
    if heldout_stream is not None:
        unigram = unigram_perplexity(train_stream, heldout_stream, block, tokenizer.vocab_size)

    def build() -> Job:
        """The model and its loss, evaluation and save (fit seeded the RNGs from train.seed)."""
        model = _model(config, tokenizer.vocab_size, checkpoint.model.train() if checkpoint else None)
        if model.config.vocab_size < tokenizer.vocab_size:
            raise BertkitError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                               f"{model.config.vocab_size}; vocabulary and weights do not match")

        def save_model(m: CausalLM, saved: dict) -> None:
            save_gpt2(output, m, tokenizer)

        batches = block_batches(train_stream, block, config.data.batch_size, seed=seed)
        trained_vocab = (output / TOKENIZER_DIR,) if checkpoint is None and vocab is None else ()
        return Job(model, causal_lm_loss, batches, save_model, heldout_evaluation(heldout_stream, config.data),
                   save_with_state=True, scratch=trained_vocab, record={"unigram_perplexity": unigram})

    result = fit(config, build, output).loop
    return GPTPretrainResult(output, result, unigram)
