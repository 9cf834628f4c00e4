"""The pre-training job: corpus -> tokenizer -> shards -> instances -> masked batches -> the training loop
-> HF-compatible model folder(s). What is trained, and how it is saved, is the objective's (objectives/)."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from bertkit.checkpoints import load_checkpoint
from bertkit.checkpoints.hf import implied_parameters
from bertkit.checkpoints.json_files import read_json
from bertkit.config import config_to_dict
from bertkit.data.shards import build_shards, open_shards, tokenizer_fingerprint
from bertkit.errors import BertkitError
from bertkit.folder_names import refuse_links
from bertkit.model.config import EncoderConfig
from bertkit.pretrain.batching import PretrainingBatches, SpecialIds
from bertkit.pretrain.config import MIN_MAX_LENGTH, PretrainConfig
from bertkit.pretrain.instances import Instances, build_instances
from bertkit.pretrain.lexicon import Lexicon, read_lexicon
from bertkit.pretrain.masking import MaskingConfig
from bertkit.pretrain.objectives import objective_for
from bertkit.pretrain.objectives.base import Objective, SaveContext
from bertkit.pretrain.objectives.mlm import PretrainingModel, evaluate_mlm
from bertkit.runtime import init_distributed, pick_device
from bertkit.tokenizer import Tokenizer, train_wordpiece
from bertkit.tokenizer.train import is_cjk
from bertkit.train import IndexedBatches, TrainResult
from bertkit.train import distributed as dist_
from bertkit.train.fit import Job, check_pretraining_output, check_resume, fit, fresh_unless_resumed, run_folder
from bertkit.train.loop import say

TOKENIZER_DIR = "tokenizer"


@dataclass
class PretrainResult:
    model_dir: Path
    train: TrainResult


def _tokenizer(config: PretrainConfig, corpus: Sequence[str], output: Path, init, vocab: Optional[str]) -> Tokenizer:
    given = None
    if vocab is not None:
        path = Path(vocab)
        given = Tokenizer.from_folder(path) if path.is_dir() else Tokenizer.from_vocab_file(path)
    if init is not None:
        if init.tokenizer is None:
            raise BertkitError(f"--model {init.path}: the checkpoint has no vocab.txt/tokenizer.json to keep")
        if given is not None and tokenizer_fingerprint(given) != tokenizer_fingerprint(init.tokenizer):
            raise BertkitError(f"--vocab {vocab} ({given.vocab_size} tokens) does not match the vocabulary of --model "
                               f"{init.path} ({init.tokenizer.vocab_size} tokens); drop --vocab to keep the "
                               "checkpoint's tokenizer")
        return init.tokenizer
    if given is not None:
        return given
    saved = output / TOKENIZER_DIR
    # kept for --resume only: a new run into an earlier run's folder (another corpus, another --vocab-size) trains
    # its own vocab instead of taking the old one
    fresh_unless_resumed(saved, config.train.resume)
    if not (saved / "vocab.txt").is_file() and not (saved / "tokenizer.json").is_file():
        if dist_.rank() == 0:   # train once, share through the run folder
            train_wordpiece(list(corpus), config.vocab.vocab_size, config.vocab.lowercase,
                            encoding=config.data.encoding).save(saved)
        dist_.barrier()
    return Tokenizer.from_folder(saved)


def prepare_data(config: PretrainConfig, corpus: Sequence[str], tokenizer: Tokenizer, shards_dir: Path,
                 seed: int, objective: Objective) -> tuple[list, Instances, Instances]:
    """Shards (built by rank 0, resumable), then instances split into train and held-out."""
    if dist_.rank() == 0:
        build_shards(corpus, tokenizer, shards_dir, config.data.segmenter, config.data.shard_tokens,
                     encoding=config.data.encoding)
    dist_.barrier()
    shards = open_shards(shards_dir)
    instances = build_instances(shards, objective.instances, config.data.max_length, seed, config.data.short_seq_prob)
    if len(instances) < 2:
        raise BertkitError(f"the corpus gives only {len(instances)} training instance(s) of max_length "
                           f"{config.data.max_length}; add text or lower --data.max_length")
    order = np.random.default_rng([seed, 7]).permutation(len(instances))
    heldout = min(config.data.max_heldout_instances, int(len(instances) * config.data.heldout_fraction))
    heldout = max(1, heldout) if config.data.heldout_fraction > 0 else 0
    return shards, instances.take(np.sort(order[heldout:])), instances.take(np.sort(order[:heldout]))


def _model(config: PretrainConfig, tokenizer: Tokenizer, init, objective: Objective) -> torch.nn.Module:
    if init is not None:
        if config.data.max_length > init.config.max_length:
            raise BertkitError(f"--data.max_length {config.data.max_length} > the {init.config.max_length} positions "
                               f"of --model {init.path}; lower --data.max_length")
        return objective.build(init.config, init)
    encoder_config = objective.encoder_config(tokenizer)
    if config.data.max_length > encoder_config.max_length:
        raise BertkitError(f"--data.max_length {config.data.max_length} > encoder.max_position_embeddings "
                           f"{encoder_config.max_position_embeddings}; raise the latter or lower the former")
    _check_fits_memory(encoder_config)
    return objective.build(encoder_config, None)


# safetensors refuses a header over 100 MB; each layer names ~16 tensors (~120 bytes each), three times over in a
# training state: 10,000 layers stay under a fifth of that (the deepest published post-LN model has 1,000).
MAX_LAYERS = 10_000


def _check_fits_memory(encoder: EncoderConfig) -> None:
    """A new model's weights, gradients and two AdamW moments (16 bytes a parameter) must fit in this machine's
    memory: `--encoder.num-layers 100000` is refused in one line instead of building layers for hours. Its
    checkpoints must fit safetensors' header: a deep, narrow model that fits memory trained a step and then failed
    saving. (BERT-family bodies; XLNet's config has sizes of its own.)"""
    if not isinstance(encoder, EncoderConfig):
        return
    if encoder.num_layers > MAX_LAYERS:
        raise BertkitError(f"--encoder.num-layers {encoder.num_layers:,} is over {MAX_LAYERS:,}: a checkpoint of "
                           "more layers names more tensors than a safetensors header holds")
    parameters = implied_parameters(encoder)
    needed = 16 * parameters
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):   # no sysconf (Windows): no check
        return
    if needed > memory:
        raise BertkitError(f"the encoder's sizes ({encoder.num_layers} layers x {encoder.hidden_size}, FFN "
                           f"{encoder.intermediate_size}, vocabulary {encoder.vocab_size}) imply "
                           f"{parameters:,} parameters, {needed / 2**30:,.0f} GiB to train, more than "
                           f"this machine's {memory / 2**30:,.0f} GiB; lower --encoder.* sizes")


# Tokens of the first shard looked at: enough to tell a Chinese corpus from an English one.
SCRIPT_SAMPLE_TOKENS = 100_000


def _warn_characters_as_words(config: PretrainConfig, tokenizer: Tokenizer, shards: list) -> None:
    """Word-level masking takes its words from WordPiece's `##` pieces, and a Chinese character is a word of its
    own there: without a segmenter, whole-word masking of Chinese is token masking. Said once, with the fix."""
    if config.data.masking not in ("whole-word", "span") or config.data.segmenter != "none":   # phrase: its lexicon
        return
    vocab = tokenizer.backend.get_vocab()
    chinese = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, index in vocab.items():
        chinese[index] = len(token) == 1 and is_cjk(token)
    sample = np.asarray(shards[0].tokens[:SCRIPT_SAMPLE_TOKENS], dtype=np.int64)
    share = float(chinese[sample].mean()) if len(sample) else 0.0
    if share >= 0.3:
        say(f"--masking {config.data.masking}: {share:.0%} of the corpus's tokens are Chinese characters, each a word "
            "of its own without a segmenter, so this masks single characters; add --data.segmenter jieba to mask "
            "whole Chinese words (Chinese BERT-wwm)")


# What a resumed run may change: how long it runs, how often it evaluates, saves and logs, and where. Any other
# setting (lr, batch size, masking, the data) was either ignored (the optimizer and schedule come back from the
# saved state) or made a run that is not the interrupted one, while run/config.effective.json named the new value.
RESUME_MAY_CHANGE = frozenset({
    "train.resume", "train.max_steps", "train.epochs", "train.time_budget", "train.eval_every", "train.save_every",
    "train.checkpoint_on_eval", "train.log_every", "train.device", "train.progress_bar", "train.max_rollbacks",
    "train.early_stopping_patience", "train.early_stopping_start", "data.eval_batch_size"})


def _check_resumed_settings(config: PretrainConfig, output: Path) -> None:
    """--resume continues the interrupted run exactly: a setting it may not change is refused in one line."""
    saved = run_folder(output) / "config.effective.json"
    if not saved.is_file():
        return
    before, now = _flat(read_json(saved)), _flat(json.loads(json.dumps(config_to_dict(config))))   # as saved
    changed = [f"{key} {before[key]!r} -> {now[key]!r}" for key in sorted(before.keys() & now.keys())
               if key not in RESUME_MAY_CHANGE and before[key] != now[key]]    # keys of one version: renamed ones pass
    if changed:
        raise BertkitError(f"--resume: {', '.join(changed)} differ from the interrupted run ({saved}); resume with "
                           "its settings, or start a new run in another --output")


def _flat(tree: dict, prefix: str = "") -> dict:
    """{"train": {"lr": 1e-3}} -> {"train.lr": 1e-3}."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _lexicon(config: PretrainConfig, tokenizer: Tokenizer) -> Optional[Lexicon]:
    masking, path = config.data.masking, config.data.lexicon
    if path is not None and masking not in ("phrase", "entity"):
        raise BertkitError(f"--lexicon {path} is used by --masking phrase or entity, not {masking}")
    if path is None:
        if masking == "entity":
            raise BertkitError("--masking entity masks the entries of a lexicon: give --lexicon FILE (one entity "
                               "per line)")
        return None
    return read_lexicon(path, tokenizer)


def run_pretraining(config: PretrainConfig, corpus: Sequence[str], output: str | Path, init: Optional[str] = None,
                    vocab: Optional[str] = None) -> PretrainResult:
    """Pre-train (or continue pre-training `init`) on `corpus`; the model folder is `output` itself, saved with
    every training state. A recipe for train/fit.py's fit, which owns the run record (output/run/), --resume,
    NaN roll-back and, on success, removing the training state and the token shards."""
    output = Path(output)
    objective = objective_for(config)
    check_resume(config.train.resume, output)
    if config.train.resume:
        _check_resumed_settings(config, output)
    else:
        check_pretraining_output(output, init)
    device = pick_device(config.train.device)
    init_distributed(device)
    checkpoint = load_checkpoint(init) if init is not None else None
    tokenizer = _tokenizer(config, corpus, output, checkpoint, vocab)
    seed = config.train.seed
    shards_dir = Path(config.data.shards_dir) if config.data.shards_dir else output / "shards"
    refuse_links(shards_dir)           # built, read back and deleted: nothing in it may point elsewhere
    shards, train_set, heldout = prepare_data(config, corpus, tokenizer, shards_dir, seed, objective)
    if dist_.rank() == 0:
        _warn_characters_as_words(config, tokenizer, shards)
    specials = SpecialIds.from_tokenizer(tokenizer)
    masking = objective.masking()
    lexicon = _lexicon(config, tokenizer)
    copies = config.data.dupe_factor if config.data.static_masking else 0
    data = PretrainingBatches(shards, train_set, specials, masking, seed, copies, lexicon)
    batches = IndexedBatches(len(data), config.data.batch_size, data.make_batch, seed=seed, drop_last=True)
    if len(batches) == 0:
        raise BertkitError(f"{len(data)} training instances make no full batch of {config.data.batch_size} per "
                           "process; lower --data.batch_size or add text")

    def build() -> Job:
        """The model and its loss, evaluation and save (fit seeded the RNGs from train.seed)."""
        model = _model(config, tokenizer, checkpoint, objective)
        if config.heads.train_only:
            objective.freeze_encoder(model)
        evaluate = None
        if len(heldout):
            held = PretrainingBatches(shards, heldout, specials, masking, seed + 1, 1, lexicon)  # fixed masks
            held_batches = [held.make_batch(list(range(i, min(i + config.data.eval_batch_size, len(heldout)))), 0)
                            for i in range(0, len(heldout), config.data.eval_batch_size)]

            def evaluate(m: torch.nn.Module) -> dict[str, float]:
                return objective.evaluate(m, held_batches, device)

        meta = {"task": "pretraining", "objective": config.data.objective, "masking": config.data.masking,
                "max_length": config.data.max_length, "init": str(init) if init else None}

        # continued pre-training keeps the --model folder's sentence settings (length, pooling, dense layers)
        sentence = checkpoint.sentence.after_training() if checkpoint is not None else None

        def save_model(m: torch.nn.Module, saved: dict) -> None:
            objective.save(m, SaveContext(output, tokenizer, {**meta, "step": saved["step"]}, sentence))

        trained_vocab = (output / TOKENIZER_DIR,) if init is None and vocab is None else ()
        return Job(model, objective.loss, batches, save_model, evaluate, save_with_state=True,
                   scratch=(() if config.data.shards_dir else (shards_dir,)) + trained_vocab,
                   record={"objective": config.data.objective})

    result = fit(config, build, output)
    return PretrainResult(output, result.loop)


def evaluate_mlm_on_corpus(model_dir: str, corpus: Sequence[str], max_length: int = 128, batch_size: int = 32,
                           masking: str = "token", seed: int = 0, device: str = "auto", segmenter: str = "none",
                           encoding: str = "utf-8") -> dict[str, float]:
    """MLM loss / accuracy / perplexity of a saved model on a corpus (packed instances, fixed masks). Whole-word
    and span masking take words from the WordPiece `##` pieces; Chinese words need segmenter="jieba" (without
    it every character is a word of its own, and whole-word masking is token masking)."""
    if max_length < MIN_MAX_LENGTH:
        raise BertkitError(f"--max-length {max_length} is under {MIN_MAX_LENGTH}: an instance holds [CLS], [SEP] "
                           "and the tokens to mask")
    checkpoint = load_checkpoint(model_dir)
    if "mlm" not in checkpoint.heads:
        raise BertkitError(f"{model_dir} has no MLM head (heads: {', '.join(checkpoint.heads) or 'none'}); "
                           "evaluate a pre-trained (BertForMaskedLM / BertForPreTraining) folder")
    if checkpoint.tokenizer is None:
        raise BertkitError(f"{model_dir} has no tokenizer files (vocab.txt / tokenizer.json)")
    max_length = min(max_length, checkpoint.config.max_length)
    target = pick_device(device)
    model = PretrainingModel(checkpoint.config, False, checkpoint.encoder, checkpoint.heads["mlm"]).to(target)
    with tempfile.TemporaryDirectory(prefix="bertkit-eval-shards-") as tmp:
        build_shards(corpus, checkpoint.tokenizer, tmp, segmenter, encoding=encoding)
        shards = open_shards(tmp)
        instances = build_instances(shards, "packed", max_length, seed)
        data = PretrainingBatches(shards, instances, SpecialIds.from_tokenizer(checkpoint.tokenizer),
                                  MaskingConfig(strategy=masking), seed, static_copies=1)
        batches = (data.make_batch(list(range(i, min(i + batch_size, len(data)))), 0)
                   for i in range(0, len(data), batch_size))
        return evaluate_mlm(model, batches, target)
