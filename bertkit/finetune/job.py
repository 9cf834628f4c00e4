"""The fine-tuning job: read, encode, train on the shared loop, keep the best model, write the run record.

Settings left unset (None, or "auto") come from the default recipe (recipe.py), chosen from the data and the
model: epochs, lr and the new head's lr, warm-up, batch size, max_length, evaluation frequency, early
stopping, class weights and precision. The choice is printed in two lines and written to run/recipe.json.
Linear warm-up then linear decay and weight decay 0.01 are BERT's (Devlin et al. 2019, appendix A.3).
Texts longer than max_length keep their head and tail (Sun et al. 2019). ULMFiT options (Howard & Ruder 2018):
layer-wise lr decay, the slanted triangular schedule, gradual unfreezing. SiATL (Chronopoulou et al. 2019):
an auxiliary MLM loss on the training texts, for folders with an MLM head (aux_mlm.py).

`output` is the best model's folder (an HF-compatible checkpoint with the head and label names), with
metrics.json beside the weights and the run record in output/run/: the effective config, package versions,
the loop's log.jsonl and loss curve. The training state is saved after each evaluation, so `resume`
continues from the last one; and no run replaces a model in `output` that scored better on the same dev
data (saved_score.py).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path


from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.data.labels import LabelMap
from bertkit.data.readers import ReadOptions
from bertkit.errors import BertkitError
from bertkit.finetune.aux_mlm import (AuxMlmModel, BatchMasker, MaskedCopy, add_aux_mlm_loss, mlm_head_for_aux_loss,
                                      task_model)
from bertkit.finetune.batching import BucketedBatches, collate
from bertkit.finetune.linear.beside import best_dev_predictions, report_beside, splits_of
from bertkit.finetune.linear.methods import LinearJob, run_linear_job
from bertkit.finetune.linear.report import finetune_advice
from bertkit.finetune.linear.model import LINEAR_TASKS
from bertkit.finetune.model import FinetuneModel, check_saved_task, hf_config_extra, model_from_checkpoint, model_meta
from bertkit.finetune.recipe import (DataProfile, ModelProfile, Recipe, Requested, choose_recipe, describe,
                                     profile_data)
from bertkit.finetune.config import FinetuneConfig
from bertkit.finetune.tasks import TASKS, build_task, check_training_labels, label_names_from, read_examples
from bertkit.runtime import fast_bf16, pick_device
from bertkit.tokenizer.coverage import texts_of, warn_unknown
from bertkit.train.fit import Job, JobResult, check_required, fit
from bertkit.train.loop import say
from bertkit.train.saved_score import dev_fingerprint, saved_score

FinetuneResult = JobResult      # what every fine-tuning job returns (train/fit.py)
CLOCK_LEAD_NOTE = 0.05          # say so when the time cap drove the lr schedule by more than 5% of the run


def run_finetune(config: FinetuneConfig) -> FinetuneResult:
    check_required(config, "finetune")
    if config.method != "finetune":
        return _linear_method(config)
    built: dict = {}
    result = fit(config, lambda: _build(config, built))
    metrics, kept, config = result.metrics, result.kept_earlier_model, built["config"]
    if result.loop is not None and result.loop.clock_lead >= CLOCK_LEAD_NOTE:
        say(f"the lr schedule followed the {config.train.time_budget} time cap, not the planned steps (the clock ran "
            f"up to {result.loop.clock_lead:.0%} of the run ahead of them): this machine "
            "was slower than the cap needs, so the same command on a quieter or faster one trains on another "
            "schedule and gives another model; --time-budget off makes the schedule follow the steps")
    if config.baseline and config.task in LINEAR_TASKS and built["dev_features"] is not None and not kept:
        label_names, dev_features, tokenizer = built["label_names"], built["dev_features"], built["tokenizer"]
        predicted = None if config.task == "regression" else best_dev_predictions(
            result.output, config.task, label_names, dev_features, tokenizer.pad_id, config.data.eval_batch_size)
        report_beside(result.output, "fine-tuned", splits_of(config.task, built["train_examples"],
                                                             built["dev_examples"], label_names),
                      metrics, predicted, config.train.seed,
                      advice=finetune_advice(config.train.lr, config.train.epochs or metrics.get("epochs", 1)))
    return result


def _build(config: FinetuneConfig, built: dict) -> Job:
    """The fine-tuning job (fit seeded the RNGs): read, build the model, fill the recipe, encode; `built` keeps what
    the baseline beside the result needs."""
    checkpoint = load_checkpoint(config.model)
    check_saved_task(checkpoint, config.task)
    mlm_head = None
    if config.aux_mlm_weight < 0 or not 0 < config.aux_mlm_decay <= 1:
        raise BertkitError(f"aux_mlm_weight must be >= 0 (got {config.aux_mlm_weight}) and aux_mlm_decay in (0, 1] "
                           f"(got {config.aux_mlm_decay})")
    if config.aux_mlm_weight > 0:
        mlm_head = mlm_head_for_aux_loss(checkpoint, config.model)   # before reading data: fail early
    if checkpoint.tokenizer is None:
        raise BertkitError(f"{config.model}: the model folder has no vocab.txt or tokenizer.json")
    if config.data.max_length is not None and config.data.max_length > checkpoint.config.max_length:
        raise BertkitError(f"--max-length {config.data.max_length} > the {checkpoint.config.max_length} positions of "
                           f"{config.model}; lower it (long inputs are windowed for ner/qa, truncated otherwise)")
    read = ReadOptions(config.data.encoding, config.data.skip_bad_rows, Path(config.output + ".rejects.jsonl")
                       if config.data.skip_bad_rows else None, skip_hint=True)
    train_examples = read_examples(config.task, config.data.train, None, True, read)[:config.data.max_train_examples]
    check_training_labels(config.task, config.data.train, train_examples)
    label_names = label_names_from(config.task, train_examples)
    dev_examples = None
    if config.data.dev:
        dev_read = dataclasses.replace(read, rejects_path=Path(config.output + ".dev.rejects.jsonl")
                                       if config.data.skip_bad_rows else None)
        known = LabelMap(tuple(label_names)) if label_names is not None else None
        dev_examples = read_examples(config.task, config.data.dev, known, True, dev_read)[:config.data.max_dev_examples]
    model = model_from_checkpoint(checkpoint, config.task, label_names)
    config, recipe, measured = _apply_recipe(config, checkpoint, model, train_examples)
    options = dataclasses.replace(config.options, max_length=config.data.max_length)
    task = build_task(config.task, checkpoint.tokenizer, model.label_names, options, train_examples,
                      recipe.class_weights)
    if config.task == "qa":
        options = dataclasses.replace(options, with_negative=task.with_negative)
    train_features = task.encode(train_examples)
    warn_unknown(checkpoint.tokenizer, texts_of(train_examples), f"fine-tune data {config.data.train}",
                 [f.input_ids for f in train_features])
    dev_features = task.encode(dev_examples) if dev_examples is not None else None
    pad_id = checkpoint.tokenizer.pad_id
    masker = (BatchMasker(checkpoint.tokenizer, config.aux_mlm_weight, config.aux_mlm_decay, config.train.seed)
              if mlm_head is not None else None)

    def make_batch(indices: list[int]):
        batch = collate([train_features[i] for i in indices], indices, pad_id, task.make_targets)
        # `batches.epoch` is the epoch being iterated: the masks and gamma follow it
        return masker(batch, batches.epoch) if masker is not None else batch

    batches = BucketedBatches([len(f.input_ids) for f in train_features], config.data.batch_size, make_batch,
                              seed=config.train.seed, bucket=config.data.bucket_by_length)
    epoch_steps = -(-config.train.epochs * len(batches) // config.train.grad_accum)    # the loop's count
    for line in describe(recipe, measured, epoch_steps).splitlines():
        say(line)

    def loss_fn(net, batch):
        copy = batch if isinstance(batch, MaskedCopy) else None
        batch = copy.batch if copy is not None else batch
        masked = (copy.input_ids, copy.labels) if copy is not None else ()
        out = net(batch.input_ids, batch.attention_mask, batch.token_type_ids, *masked)
        loss = task.loss(out.logits if copy is not None else out, batch.targets)
        metrics = {"tokens": float(batch.attention_mask.sum())}
        if copy is not None:
            loss, aux_metrics = add_aux_mlm_loss(loss, out.mlm_logits, copy)
            metrics.update(aux_metrics)
        return loss, metrics

    output = Path(config.output)
    meta_extra = {"task_options": dataclasses.asdict(options), "finetuned_from": str(config.model)}
    metric = config.metric or TASKS[config.task].main_metric
    dev_data = dev_fingerprint(config.task, config.data.dev, len(dev_examples)) if dev_examples is not None else None
    to_beat = saved_score(output, metric, dev_data)
    if to_beat is not None:
        say(f"{output} holds a model with {metric} {to_beat:.4g} on this dev set; this run replaces it only "
            "with a better one")

    def save(net: FinetuneModel, metrics: dict) -> None:
        net = task_model(net)            # without the aux MLM head: the folder is the task model only
        save_checkpoint(output, net.encoder, checkpoint.tokenizer, {net.head_key: net.head},
                        model_meta(net, {**meta_extra, "dev_metrics": metrics}), hf_config_extra(net),
                        sentence=checkpoint.sentence.after_training())

    evaluate = None
    if dev_features is not None:
        def evaluate(net):
            return task.evaluate(net, dev_features, dev_examples, config.data.eval_batch_size)

    # With a time budget the run ends after `epochs` or at the budget, whichever comes first; the lr schedule
    # follows whichever is further along (the loop's time-budget schedule).
    # --max-steps N: the run and the lr schedule span N optimizer steps (epochs cycle as needed; --epochs is then
    # ignored, as in transformers' Trainer); a --time-budget given too ends it earlier if reached first.
    train = config.train
    recipe_steps = train.max_steps is None and bool(train.time_budget)
    max_steps = epoch_steps if recipe_steps else train.max_steps
    trained = AuxMlmModel(model, mlm_head) if mlm_head is not None else model
    built.update(config=config, label_names=label_names, dev_features=dev_features, tokenizer=checkpoint.tokenizer,
                 train_examples=train_examples, dev_examples=dev_examples)
    return Job(trained, loss_fn, batches, save, evaluate, metric, to_beat, tie_breaker="loss",
               on_epoch_start=_gradual_unfreezing if config.gradual_unfreezing else None, is_head=_is_head,
               record={"dev_data": dev_data, "train_examples": len(train_examples),
                       "train_features": len(train_features), "recipe": recipe.to_dict()},
               run_files={"recipe.json": recipe.to_dict()}, epoch_batches=len(batches) if recipe_steps else None,
               config=config, loop=dict(max_steps=max_steps, checkpoint_on_eval=evaluate is not None,
                                        early_stopping_patience=train.early_stopping_patience or None,
                                        early_stopping_start=recipe.early_stopping_start))


def _apply_recipe(config: FinetuneConfig, checkpoint, model: FinetuneModel,
                  examples) -> tuple[FinetuneConfig, Recipe, DataProfile]:
    """Fill every unset setting from the default recipe; returns the effective config, the recipe and the data
    profile it was chosen from (the job prints both once it has counted its batches)."""
    device = pick_device(config.train.device)
    encoder = checkpoint.config
    profile = ModelProfile(encoder.hidden_size, encoder.num_layers, encoder.max_length, fast_bf16(device) is not None,
                           new_head=checkpoint.heads.get(model.head_key) is None)
    measured = profile_data(config.task, checkpoint.tokenizer, examples, model.label_names)
    asked = Requested(**{f.name: getattr(config.data if f.name in _DATA_SETTINGS else
                                         config.train if f.name != "class_weights" else config, f.name)
                         for f in dataclasses.fields(Requested)})
    recipe = choose_recipe(measured, profile, asked)
    trained = {name: getattr(recipe, name) for name in ("epochs", "lr", "head_lr", "warmup_ratio", "eval_every",
                                                        "precision", "time_budget")}
    patience = recipe.early_stopping_patience
    train = dataclasses.replace(config.train, **trained, early_stopping_patience=patience if patience else 0)
    data = dataclasses.replace(config.data, **{name: getattr(recipe, name) for name in _DATA_SETTINGS})
    return dataclasses.replace(config, train=train, data=data), recipe, measured


_DATA_SETTINGS = ("batch_size", "max_length")     # the recipe's choices that are data.* fields


def _is_head(name: str) -> bool:
    """The task head's parameters (FinetuneModel.head, also inside AuxMlmModel): they train at head_lr."""
    return re.search(r"(?:^|\.)head\.", name) is not None


# Settings of the gradient-descent loop: a linear method has none of them (its regularization is chosen on dev).
_LOOP_ONLY = ("train.epochs", "train.lr", "train.head_lr", "data.batch_size", "train.warmup_ratio",
              "train.eval_every", "train.early_stopping_patience", "train.layerwise_lr_decay", "gradual_unfreezing",
              "aux_mlm_weight", "train.resume", "train.time_budget", "class_weights", "train.max_steps")


def _linear_method(config: FinetuneConfig) -> FinetuneResult:
    """--method linear-probe | hybrid (bertkit.finetune.linear.methods), then the baseline beside it."""
    defaults = FinetuneConfig()
    for name in _LOOP_ONLY:
        section, _, leaf = name.rpartition(".")
        given = getattr(getattr(config, section) if section else config, leaf)
        if given != getattr(getattr(defaults, section) if section else defaults, leaf):
            raise BertkitError(f"--{leaf.replace('_', '-')} is a fine-tuning setting; --method {config.method} "
                               "fits a linear model on frozen vectors (its regularization is chosen on dev)")
    read = ReadOptions(config.data.encoding, config.data.skip_bad_rows, Path(config.output + ".rejects.jsonl")
                       if config.data.skip_bad_rows else None, skip_hint=True)
    data = config.data
    job = LinearJob(config.method, config.task, config.model, data.train, data.dev, config.output, read,
                    data.max_train_examples, data.max_dev_examples, config.train.seed, max_length=data.max_length)
    result = run_linear_job(job)
    if config.baseline and not result.kept_earlier_model:
        report_beside(result.output, config.method, result.splits, result.dev, result.predicted_dev, config.train.seed,
                      result.tfidf)
    return FinetuneResult(result.output, result.dev, result.seconds, 0, 0, config.method, result.kept_earlier_model)


def _gradual_unfreezing(model: FinetuneModel, epoch: int) -> None:
    """ULMFiT: epoch 0 trains only the head (and pooler), each later epoch one more block from the top; the
    embeddings join with the last block. Frozen parameters get no gradient, so AdamW leaves them as they are."""
    model = task_model(model)            # the aux MLM head (if any) always trains
    blocks = list(model.encoder.blocks)
    trainable = set()
    for block in blocks[len(blocks) - min(epoch, len(blocks)):]:
        trainable.update(id(p) for p in block.parameters())
    if epoch >= len(blocks):
        trainable.update(id(p) for p in model.encoder.embeddings.parameters())
    frozen_part = [*model.encoder.embeddings.parameters(), *(p for b in blocks for p in b.parameters())]
    for param in frozen_part:
        param.requires_grad_(id(param) in trainable)
