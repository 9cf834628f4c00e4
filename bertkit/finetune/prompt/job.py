"""Prompt-based classification as a job (`bertkit finetune --task classification --template T --verbalizer V`):
PET (or P-tuning with --ptuning) on an MLM, trained with pet_loss on the shared loop, or zero-shot with
--epochs 0. Data files are the classification files (`{"text", "label"}` JSONL, TSV, CSV); every label must be
one of the verbalizer's.

The saved folder is a BertForMaskedLM folder whose bertkit.json holds task "prompt-classification", the
template, the verbalizer and the label names. P-tuning's learned prompt vectors are written into the embedding
rows of the reserved [unusedN] tokens the template's [P] slots use, so the folder needs no extra weights and
reloads as a plain PETClassifier (bertkit evaluate / predict).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from bertkit.atomic_write import write_json
from bertkit.atomic_write import write_jsonl
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.data.labels import LabelMap
from bertkit.data.readers import ReadOptions, TextExample, read_text_examples
from bertkit.errors import BertkitError, CheckpointError
from bertkit.finetune.metrics import classification_metrics
from bertkit.finetune.predictions import sequence_predictions
from bertkit.finetune.recipe import prompt_recipe
from bertkit.finetune.tasks import TASKS
from bertkit.job_config import JobData, TrainConfig
from bertkit.finetune.loop_job import LoopJobConfig, max_length_for, mlm_head_of
from bertkit.finetune.prompt.pet import PROMPT_SLOT, Pattern, PETClassifier, Verbalizer, pet_loss
from bertkit.finetune.prompt.ptuning import PTuningClassifier
from bertkit.runtime import pick_device
from bertkit.tokenizer.coverage import texts_of, warn_unknown
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.train import IndexedBatches
from bertkit.train.fit import Job, JobResult, fit, record_run, run_folder
from bertkit.train.loop import say
from bertkit.train.saved_score import METRICS_FILE

TASK = "prompt-classification"
METRIC = TASKS[TASK].main_metric


@dataclass
class PromptTrain(TrainConfig):
    epochs: Optional[int] = None          # None: the few-shot recipe (bertkit.finetune.recipe.prompt_recipe)
    # None: the few-shot recipe (5e-5 at width 384), 1e-3 for prompt vectors only
    lr: Optional[float] = None  # type: ignore[assignment]
    warmup_ratio: float = 0.1
    seed: int = 42
    log_every: int = 10


@dataclass
class PromptConfig(LoopJobConfig):
    template: str = ""                    # "{text} It was [MASK]."; [P] slots (P-tuning) hold learned vectors
    verbalizer: str = ""                  # "pos=great,neg=terrible": one vocabulary token per label
    ptuning: bool = False                 # learn continuous prompt vectors for the template's [P] slots
    freeze_encoder: bool = False          # P-tuning: train only the prompt vectors
    data: JobData = field(default_factory=lambda: JobData(batch_size=16))   # PET's few-shot batch size
    train: PromptTrain = field(default_factory=PromptTrain)


def _padded(rows: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    padded = pad_to_tensors(rows, pad_id)
    return {"input_ids": padded["input_ids"], "attention_mask": padded["attention_mask"]}   # PET reads no segments


@torch.no_grad()
def label_scores(model: PETClassifier, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """(N, num_labels) verbalizer logits at [MASK], in input order."""
    model.eval()
    device = next(model.parameters()).device
    rows = model.pattern.encode(model.tokenizer, texts, min(model.max_length, model.encoder.config.max_length),
                                model.prompt_token_ids())
    out = []
    for start in range(0, len(rows), batch_size):
        batch = {k: v.to(device) for k, v in _padded(rows[start:start + batch_size], model.tokenizer.pad_id).items()}
        out.append(model(**batch).float().cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, len(model.verbalizer.labels)), dtype=np.float32)


def evaluate_examples(model: PETClassifier, examples: Sequence[TextExample], batch_size: int = 64) -> dict:
    labels = model.verbalizer.labels
    was_training = model.training
    predicted = label_scores(model, [ex.text for ex in examples], batch_size).argmax(axis=-1)
    model.train(was_training)
    gold = np.array([labels.index(ex.label) for ex in examples])
    return {**classification_metrics(gold, predicted, len(labels)), "examples": len(examples)}


def _read(path: str, labels: tuple[str, ...], encoding: str, limit: Optional[int]) -> list[TextExample]:
    examples = read_text_examples(path, "class", LabelMap(labels), True, ReadOptions(encoding))[:limit]
    paired = next((ex for ex in examples if ex.text_pair is not None), None)
    if paired is not None:
        raise BertkitError(f"{path}:{paired.line}: prompt classification takes single texts; a template has "
                           "one {text} slot, so pairs (text_pair / text_b) are not supported")
    return examples


def _build_model(config: PromptConfig, checkpoint, max_length: int) -> PETClassifier:
    mlm = mlm_head_of(checkpoint, "prompt-based classification (--template)")
    pattern = Pattern.parse(config.template)
    verbalizer = Verbalizer.parse(config.verbalizer, checkpoint.tokenizer)
    if config.freeze_encoder and not config.ptuning:
        raise BertkitError("--freeze-encoder trains only P-tuning's prompt vectors: add --ptuning (and [P] slots "
                           "to the template), or drop --freeze-encoder")
    if config.ptuning:
        return PTuningClassifier(checkpoint.encoder, mlm, checkpoint.tokenizer, pattern, verbalizer,
                                 max_length, freeze_encoder=config.freeze_encoder)
    if pattern.num_prompt_slots:
        raise BertkitError(f"the template has {pattern.num_prompt_slots} {PROMPT_SLOT} slot(s) for learned prompt "
                           "vectors: add --ptuning, or write words instead")
    return PETClassifier(checkpoint.encoder, mlm, checkpoint.tokenizer, pattern, verbalizer, max_length)


def run_prompt_finetune(config: PromptConfig) -> JobResult:
    """Train (or with epochs=0 only evaluate) a prompt classifier and save the best model to config.output."""
    for name in ("model", "output", "template", "verbalizer"):
        if not getattr(config, name):
            raise BertkitError(f"prompt-based classification needs --{name.replace('_', '-')}")
    zero_shot = config.train.epochs == 0
    if zero_shot and not config.data.dev:
        raise BertkitError("--epochs 0 evaluates zero-shot on --dev: give --dev")
    if not zero_shot and not config.data.train:
        raise BertkitError("prompt-based fine-tuning needs --train (or --epochs 0 --dev FILE for zero-shot)")
    return fit(config, lambda: _prompt_job(config, zero_shot))


def _prompt_job(config: PromptConfig, zero_shot: bool) -> Job | JobResult:
    """The job `run_prompt_finetune` trains (fit seeded the RNGs); zero-shot: the dev evaluation, saved."""
    checkpoint = load_checkpoint(config.model)
    max_length = max_length_for(config, checkpoint)
    model = _build_model(config, checkpoint, max_length)
    labels = model.verbalizer.labels
    data = config.data
    train_examples = [] if zero_shot else _read(data.train, labels, data.encoding, data.max_train_examples)
    dev_examples = _read(data.dev, labels, data.encoding, data.max_dev_examples) if data.dev else None
    warn_unknown(checkpoint.tokenizer, texts_of(train_examples or dev_examples or []),
                 f"fine-tune data {config.data.train or config.data.dev}")
    if not zero_shot:
        frozen = config.ptuning and config.freeze_encoder
        epochs, lr, line = prompt_recipe(len(train_examples), checkpoint.config.hidden_size, data.batch_size, frozen)
        given = config.train
        config = dataclasses.replace(config, train=dataclasses.replace(
            given, epochs=given.epochs if given.epochs is not None else epochs,
            lr=given.lr if given.lr is not None else lr))
        say(line if (config.train.epochs, config.train.lr) == (epochs, lr) else
            f"recipe: {config.train.epochs} epochs, lr {config.train.lr:g} (set by the user)")
    device = pick_device(config.train.device)
    output = Path(config.output)
    meta = {"task": TASK, "labels": list(labels), "template": config.template, "verbalizer": config.verbalizer,
            "ptuning": config.ptuning, "prompt_token_ids": list(model.prompt_token_ids()),
            "max_length": max_length, "finetuned_from": str(config.model)}

    def save(net: PETClassifier, metrics: dict) -> None:
        if isinstance(net, PTuningClassifier):
            net.store_prompt_in_embeddings()
        save_checkpoint(output, net.encoder, net.tokenizer, {"mlm": net.mlm}, {**meta, "dev_metrics": metrics})

    def evaluate_dev(net: PETClassifier) -> dict:
        return evaluate_examples(net, dev_examples, config.data.eval_batch_size)

    evaluate = evaluate_dev if dev_examples is not None else None

    if zero_shot:
        record_run(config, run_folder(output))
        model.to(device)
        metrics = evaluate(model)
        save(model, metrics)
        write_json(output / METRICS_FILE, {"dev": metrics, "metric_for_best": METRIC, "zero_shot": True,
                                           "train_examples": 0})
        return JobResult(output, metrics, 0.0, 0, 0, "zero_shot")

    rows = model.pattern.encode(model.tokenizer, [ex.text for ex in train_examples],
                                max_length, model.prompt_token_ids())
    targets = torch.tensor([labels.index(ex.label) for ex in train_examples])

    def make_batch(indices: list[int], epoch: int) -> dict:
        return {**_padded([rows[i] for i in indices], model.tokenizer.pad_id), "labels": targets[indices]}

    batches = IndexedBatches(len(rows), config.data.batch_size, make_batch, seed=config.train.seed)
    return Job(model, pet_loss, batches, save, evaluate, METRIC if evaluate is not None else None,
               record={"train_examples": len(train_examples), "lr": config.train.lr,
                       "epochs_planned": config.train.epochs}, config=config)


def load_prompt_classifier(folder: str | Path, device: Optional[str] = None) -> PETClassifier:
    """A saved prompt classifier (P-tuning ones included) as a PETClassifier, in eval mode."""
    checkpoint = load_checkpoint(folder)
    meta = checkpoint.meta or {}
    if meta.get("task") != TASK:
        raise CheckpointError(f"{folder} is not a prompt classifier (bertkit.json task is {meta.get('task')!r}, "
                              f"not {TASK!r})")
    mlm = mlm_head_of(checkpoint, "a prompt classifier")
    verbalizer = Verbalizer.parse(meta.get("verbalizer", ""), checkpoint.tokenizer)
    if list(verbalizer.labels) != list(meta.get("labels", [])):
        raise CheckpointError(f"{folder}: bertkit.json's labels do not match its verbalizer; the file was edited")
    model = PETClassifier(checkpoint.encoder, mlm, checkpoint.tokenizer, Pattern.parse(meta.get("template", "")),
                          verbalizer, int(meta.get("max_length", 256)), meta.get("prompt_token_ids", ()))
    return model.to(pick_device(device)).eval()


def evaluate_prompt_file(folder: str | Path, data: str | Path, encoding: str = "utf-8", batch_size: int = 64) -> dict:
    model = load_prompt_classifier(folder)
    return evaluate_examples(model, _read(str(data), model.verbalizer.labels, encoding, None), batch_size)


def predict_prompt_file(folder: str | Path, input_path: str | Path, output_path: str | Path,
                        encoding: str = "utf-8", batch_size: int = 64) -> int:
    """One JSON line per input row: line, text, label, score and the per-label probabilities."""
    model = load_prompt_classifier(folder)
    examples = read_text_examples(input_path, "class", None, False, ReadOptions(encoding))
    scores = label_scores(model, [ex.text for ex in examples], batch_size)
    predictions = sequence_predictions(scores, TASK, model.verbalizer.labels)
    return write_jsonl(output_path, ({"line": example.line, "text": example.text, **prediction}
                                     for example, prediction in zip(examples, predictions)))


__all__ = ["PromptConfig", "TASK", "evaluate_prompt_file", "label_scores", "load_prompt_classifier",
           "predict_prompt_file", "run_prompt_finetune"]
