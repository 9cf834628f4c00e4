"""bertkit's tiny ELECTRA against the same model in Hugging Face transformers, trained by one minimal loop (issue 18).

    python benchmarks/electra_reference.py --steps 1500 --threads 1 --sides bertkit hf cli --json /tmp/el_ref.json

Does the discriminator's slow start (it stays at the constant "original everywhere" predictor for ~1,000 steps)
come from bertkit, or is it what ELECTRA does at this scale? Each side is its own process (`--threads` each, all at
once) and sees the same things:
  * data: bertkit's own pipeline for `pretrain --config tiny --objective electra` (the corpus's shards, packed
    128-token instances, seed 0, batch 32, dynamic masking of 15%: 85% [MASK], the rest kept), so every side reads
    the very same batches in the same order, with the same masks;
  * weights: bertkit builds the generator and discriminator exactly as the CLI does (seeded like train/fit.py);
    the `hf` side loads those weights into ElectraForMaskedLM + ElectraForPreTraining and ties them the way
    ELECTRA does (one ElectraEmbeddings module: token / position / segment tables and LayerNorm; the generator's
    output layer is the shared token table);
  * optimisation: AdamW (betas 0.9 / 0.999, eps 1e-6, weight decay 0.01 except biases and LayerNorms), the
    preset's lr 1e-3, linear warm-up over 6% of --steps then linear decay to 0, global-norm clipping at 1.0,
    loss = generator MLM + lambda (50) x discriminator BCE over every real token.
What is each side's own:
  * `bertkit`: ElectraPretrainingModel, electra_loss (its inverse-CDF sampling) and bertkit's AdamW groups and
    schedule (train/optim.py), in the minimal loop below;
  * `hf`: transformers' modules, the loss written here from the paper, Gumbel-max sampling as the original code's
    `sample_from_softmax`, torch.optim.AdamW (not fused) with transformers' get_linear_schedule_with_warmup;
  * `cli`: `python -m bertkit pretrain --config tiny --objective electra --max-steps N` itself (bertkit's training
    loop, the path users run); its log.jsonl has no per-class accuracy, so its "replaced acc" column is empty.
Logged per --log-every steps (means over the window's training batches): RTD accuracy minus the prior (1 - the
replaced rate), the prior's entropy minus the RTD loss (nats; > 0 when the discriminator beats the constant
predictor), the generator's MLM accuracy, and the discriminator's accuracy on the replaced tokens; and every
--eval-every steps the same on held-out batches (fixed masks, fixed sampling seed).

Levers: --generator-width and --discriminator-weight (every side; `cli` passes them as --electra.* flags) and
--temperature (the original code's sampling temperature: samples from softmax(logits / temperature); the `bertkit`
and `hf` sides only, the CLI has no such option).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DATA = Path("../shared/data")
SIDES = ("bertkit", "hf", "cli")


def entropy(rate: float) -> float:
    """Binary entropy (nats) of a replaced rate: the RTD loss of the best constant predictor."""
    if rate <= 0 or rate >= 1:
        return 0.0
    return -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))


def token_metrics(logits, replaced, attention) -> dict[str, float]:
    """The discriminator's metrics over the real tokens of one batch: (B, T) logits, bool targets, 0/1 attention."""
    import torch.nn.functional as F

    real = attention.bool()
    logits, target = logits.detach().float()[real], replaced[real]
    predicted = logits > 0
    rate = float(target.float().mean())
    accuracy = float((predicted == target).float().mean())
    return {"rtd_loss": float(F.binary_cross_entropy_with_logits(logits, target.float())),
            "rtd_accuracy": accuracy, "replaced_rate": rate, "acc_minus_prior": accuracy - (1 - rate),
            "replaced_accuracy": float(predicted[target].float().mean()) if bool(target.any()) else float("nan"),
            "original_accuracy": float((~predicted[~target]).float().mean()), "auc": auc(logits, target)}


def auc(scores, target) -> float:
    """ROC AUC of the "replaced" scores (Mann-Whitney): 0.5 for a constant predictor, whatever its bias; it moves
    before the accuracy does, which needs a logit above 0."""
    positives, negatives = int(target.sum()), int((~target).sum())
    if not positives or not negatives:
        return float("nan")
    ranks = scores.double().argsort().argsort().double() + 1                        # 1..R
    return float((ranks[target].sum() - positives * (positives + 1) / 2) / (positives * negatives))


# --- data and initial weights: bertkit's pipeline for `pretrain --config tiny --objective electra` ----------

def make_config(args):
    """The tiny preset as the CLI reads it, with this run's objective, steps and levers."""
    import dataclasses

    from bertkit.config import find_config, load_config
    from bertkit.pretrain.config import PretrainConfig

    config = load_config(PretrainConfig, find_config("tiny", "pretrain"))
    return dataclasses.replace(
        config, data=dataclasses.replace(config.data, objective="electra"),
        train=dataclasses.replace(config.train, max_steps=args.steps, time_budget=None, seed=args.seed),
        electra=dataclasses.replace(config.electra, generator_width=args.generator_width,
                                    discriminator_weight=args.discriminator_weight))


def tokenizer(args):
    from bertkit.tokenizer import Tokenizer, train_wordpiece

    folder = Path(args.work) / "tokenizer"
    if not (folder / "vocab.txt").is_file() and not (folder / "tokenizer.json").is_file():
        train_wordpiece([args.corpus], 8000, True).save(folder)
    return Tokenizer.from_folder(folder)


def data_and_model(args):
    """(config, training batches, held-out batches, bertkit's ElectraPretrainingModel): what run_pretraining builds
    for the same flags, in the same order, so that the weights are the CLI's too."""
    from bertkit.pretrain.batching import PretrainingBatches, SpecialIds
    from bertkit.pretrain.job import prepare_data
    from bertkit.pretrain.objectives import objective_for
    from bertkit.runtime import seed_everything
    from bertkit.train import IndexedBatches

    config = make_config(args)
    objective = objective_for(config)
    tok = tokenizer(args)
    # the data of seed 0 whatever --seed (which changes the weights, dropout and samples only)
    shards, train_set, heldout = prepare_data(config, [args.corpus], tok, Path(args.work) / "shards", 0, objective)
    specials, masking = SpecialIds.from_tokenizer(tok), objective.masking()
    data = PretrainingBatches(shards, train_set, specials, masking, 0, 0, None)
    batches = IndexedBatches(len(data), config.data.batch_size, data.make_batch, seed=0, drop_last=True)
    held = PretrainingBatches(shards, heldout, specials, masking, 1, 1, None)
    size = config.data.eval_batch_size
    count = min(len(heldout), args.eval_instances)
    held_batches = [held.make_batch(list(range(i, min(i + size, count))), 0) for i in range(0, count, size)]
    seed_everything(config.train.seed)
    model = objective.build(objective.encoder_config(tok), None)
    return config, batches, held_batches, model


# --- the two models' forward passes ----------------------------------------------------------------------

class BertkitSide:
    def __init__(self, model, config, temperature=1.0):
        import torch

        from bertkit.model import electra
        from bertkit.train.optim import Schedule, build_optimizer

        if temperature != 1.0:          # the lever: the model module's sampling, on logits / temperature
            plain = electra.replace_masked
            electra.replace_masked = lambda ids, masked, logits, rng=None: plain(ids, masked, logits / temperature, rng)

        self.model, self.weight = model, config.electra.discriminator_weight
        t = config.train
        self.optimizer = build_optimizer(model, t.lr, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps)
        self.schedule = Schedule(t.schedule, t.max_steps, None, t.warmup_ratio, t.warmup_steps)
        self.clip = t.clip_norm
        self.captured = {}
        model.register_forward_hook(lambda module, inputs, output: self.captured.__setitem__("out", output))
        self.torch = torch

    def loss(self, batch, rng=None):
        from bertkit.pretrain.objectives.electra import electra_loss

        loss, metrics = electra_loss(self.model, batch, self.weight, rng)
        out = self.captured["out"]
        return loss, out.discriminator_logits, out.replaced, metrics["mlm_accuracy"]

    def step(self, loss):
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.schedule.apply(self.optimizer)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step += 1


def hf_models(model, folder: Path):
    """transformers' ElectraForMaskedLM (generator) and ElectraForPreTraining (discriminator) loaded from the folders
    bertkit saves for `model` (as `bertkit pretrain --objective electra` does), tied as ELECTRA ties them."""
    import transformers

    from bertkit.checkpoints import save_checkpoint

    heads = model.heads()
    save_checkpoint(folder / "discriminator", model.discriminator, None, heads["discriminator"])
    save_checkpoint(folder / "generator", model.generator, None, heads["generator"])
    discriminator = transformers.ElectraForPreTraining.from_pretrained(folder / "discriminator")
    generator = transformers.ElectraForMaskedLM.from_pretrained(folder / "generator")
    generator.electra.embeddings = discriminator.electra.embeddings          # one embeddings module
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    return generator, discriminator


class HFSide:
    def __init__(self, model, config, temperature: float, folder: Path):
        import torch
        import transformers
        from torch import nn

        self.torch = torch
        self.generator, self.discriminator = hf_models(model, folder)
        self.weight, t = config.electra.discriminator_weight, config.train
        self.net = nn.ModuleDict({"generator": self.generator, "discriminator": self.discriminator})
        decay, no_decay, seen = [], [], set()
        for name, param in self.net.named_parameters():
            if id(param) in seen:
                continue
            seen.add(id(param))
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
        self.params = decay + no_decay
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=t.lr,
                                           betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps, foreach=False)
        self.scheduler = transformers.get_linear_schedule_with_warmup(
            self.optimizer, round(t.warmup_ratio * t.max_steps), t.max_steps)
        self.clip = t.clip_norm
        self.temperature = temperature

    def loss(self, batch, rng=None):
        """MLM(generator) + lambda x RTD, as the paper; sampling by Gumbel-max as the original code."""
        torch, F = self.torch, self.torch.nn.functional
        labels, attention, types = batch["labels"], batch["attention_mask"], batch["token_type_ids"]
        masked = labels != -100
        original = torch.where(masked, labels, batch["input_ids"])
        hidden = self.generator.electra(input_ids=batch["input_ids"], attention_mask=attention,
                                        token_type_ids=types).last_hidden_state
        logits = self.generator.generator_lm_head(self.generator.generator_predictions(hidden[masked]))   # (N, V)
        targets = labels[masked]
        mlm = F.cross_entropy(logits, targets)
        with torch.no_grad():
            u = torch.rand(logits.shape, generator=rng)
            gumbel = -torch.log(-torch.log(u + 1e-9) + 1e-9)
            sampled = torch.argmax(logits.float() / self.temperature + gumbel, dim=-1)
        corrupted = original.clone()
        corrupted[masked] = sampled
        replaced = corrupted != original
        rtd_logits = self.discriminator(input_ids=corrupted, attention_mask=attention, token_type_ids=types).logits
        real = attention.bool()
        rtd = F.binary_cross_entropy_with_logits(rtd_logits[real], replaced[real].float())
        accuracy = float((logits.argmax(-1) == targets).float().mean())
        return mlm + self.weight * rtd, rtd_logits, replaced, accuracy

    def step(self, loss):
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


# --- one side -------------------------------------------------------------------------------------------

def mean_of(rows: list[dict], key: str) -> float:
    """The mean of `key` over the rows, each weighted by its "weight" (held-out batches: their real tokens)."""
    pairs = [(r[key], r.get("weight", 1.0)) for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if pairs else float("nan")


def summarize(rows: list[dict]) -> dict[str, float]:
    out = {k: mean_of(rows, k) for k in ("rtd_loss", "rtd_accuracy", "replaced_rate", "acc_minus_prior",
                                         "replaced_accuracy", "original_accuracy", "mlm_accuracy", "entropy", "auc")}
    out["entropy_minus_loss"] = out["entropy"] - out["rtd_loss"]
    return out


def run_side(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    config, batches, held_batches, model = data_and_model(args)
    side = (BertkitSide(model, config, args.temperature) if args.side == "bertkit" else
            HFSide(model, config, args.temperature, Path(args.work) / f"hf-init-seed{args.seed}"))
    net = model if args.side == "bertkit" else side.net
    from bertkit.runtime import seed_everything
    seed_everything(config.train.seed)          # as train/loop.py does before its first step

    def evaluate() -> dict[str, float]:
        net.eval()
        rng, rows = torch.Generator().manual_seed(0), []
        with torch.no_grad():
            for batch in held_batches:
                _, logits, replaced, mlm_accuracy = side.loss(batch, rng)
                row = token_metrics(logits, replaced, batch["attention_mask"])
                rows.append({**row, "mlm_accuracy": mlm_accuracy, "entropy": entropy(row["replaced_rate"]),
                             "weight": float(batch["attention_mask"].sum())})
        net.train()
        return summarize(rows)

    net.train()
    log, window, step_s, step = [], [], [], 0
    while step < args.steps:
        for batch in batches:
            started = time.perf_counter()
            loss, logits, replaced, mlm_accuracy = side.loss(batch)
            side.step(loss)
            step_s.append(time.perf_counter() - started)
            step += 1
            row = token_metrics(logits, replaced, batch["attention_mask"])
            window.append({**row, "mlm_accuracy": mlm_accuracy, "entropy": entropy(row["replaced_rate"])})
            if step % args.log_every == 0:
                record = {"step": step, "train": summarize(window), "elapsed_s": round(sum(step_s), 1)}
                window = []
                if step % args.eval_every == 0 or step == args.steps:
                    record["heldout"] = evaluate()
                log.append(record)
                print(json.dumps({"side": args.side, **record}), flush=True)
            if step >= args.steps:
                break
    if args.save and args.side == "bertkit":      # the discriminator folder, as `bertkit pretrain` saves it
        from bertkit.checkpoints import save_checkpoint

        folder = Path(args.save)
        save_checkpoint(folder, model.discriminator, tokenizer(args), model.heads()["discriminator"],
                        {"task": "pretraining", "objective": "electra", "step": step})
    return {"side": args.side, "steps": step, "median_step_ms": 1000 * statistics.median(step_s), "log": log}


def run_cli(args) -> dict:
    """`bertkit pretrain --config tiny --objective electra` for --steps, read back from its log.jsonl."""
    out = Path(args.work) / f"cli-w{args.generator_width}-l{args.discriminator_weight}"
    command = [sys.executable, "-m", "bertkit", "pretrain", "--config", "tiny", "--corpus", args.corpus,
               "--vocab", str(Path(args.work) / "tokenizer"), "--objective", "electra", "--output", str(out),
               "--max-steps", str(args.steps), "--train.progress_bar=false", f"--train.eval_every={args.eval_every}",
               "--train.save_every=0", "--train.log_every=1", f"--data.shards_dir={Path(args.work) / 'shards'}", f"--electra.generator_width={args.generator_width}",
               f"--electra.discriminator_weight={args.discriminator_weight}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cli failed ({done.returncode}):\n{done.stderr[-3000:]}")
    logs = sorted(out.rglob("log.jsonl"))
    records = [json.loads(line) for line in logs[0].read_text().splitlines() if line.strip()]
    steps = [r for r in records if "rtd_loss" in r]
    evals = {r["step"]: r["eval"] for r in records if "eval" in r}
    log, previous_elapsed, step_s = [], 0.0, []
    for r in steps:
        step_s.append(r["elapsed_s"] - previous_elapsed)
        previous_elapsed = r["elapsed_s"]
    for end in range(args.log_every, args.steps + 1, args.log_every):
        rows = [{"rtd_loss": r["rtd_loss"], "rtd_accuracy": r["rtd_accuracy"], "replaced_rate": r["replaced"],
                 "acc_minus_prior": r["rtd_accuracy"] - (1 - r["replaced"]), "mlm_accuracy": r["mlm_accuracy"],
                 "entropy": entropy(r["replaced"]), "replaced_accuracy": None, "original_accuracy": None}
                for r in steps if end - args.log_every < r["step"] <= end]
        record = {"step": end, "train": summarize(rows), "elapsed_s": round(sum(step_s[:end]), 1)}
        if end in evals:
            e = evals[end]
            record["heldout"] = {"rtd_loss": e["rtd_loss"], "rtd_accuracy": e["rtd_accuracy"],
                                 "replaced_rate": e["replaced"], "mlm_accuracy": e["mlm_accuracy"],
                                 "acc_minus_prior": e["rtd_accuracy"] - (1 - e["replaced"]),
                                 "entropy_minus_loss": entropy(e["replaced"]) - e["rtd_loss"]}
        log.append(record)
    return {"side": "cli", "steps": len(steps), "median_step_ms": 1000 * statistics.median(step_s[1:]), "log": log}


# --- driver ---------------------------------------------------------------------------------------------

def table(results: list[dict], every: int) -> str:
    lines = ["| side | step | acc - prior | entropy - RTD loss (nats) | RTD loss | gen MLM acc | replaced acc | AUC |"
             " held-out acc - prior | held-out entropy - loss | held-out AUC |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for result in results:
        for record in result["log"]:
            if record["step"] % every and record["step"] != result["steps"]:
                continue
            t, h = record["train"], record.get("heldout") or {}
            fmt = (lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.4f}")
            plain = (lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}")
            lines.append(f"| {result['name']} | {record['step']} | {fmt(t['acc_minus_prior'])} | "
                         f"{fmt(t['entropy_minus_loss'])} | {t['rtd_loss']:.4f} | {t['mlm_accuracy']:.3f} | "
                         f"{plain(t['replaced_accuracy'])} | {plain(t['auc'])} | "
                         f"{fmt(h.get('acc_minus_prior'))} | {fmt(h.get('entropy_minus_loss'))} | {plain(h.get('auc'))} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each side's process")
    parser.add_argument("--sides", nargs="+", default=["bertkit", "hf"], choices=SIDES,
                        help="run at the same time, one process each")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)          # a child process
    parser.add_argument("--corpus", default=str(DATA / "en_corpus.txt.gz"))
    parser.add_argument("--work", default="/tmp/electra_reference")
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--eval-instances", type=int, default=1000,
                        help="held-out instances evaluated (at most; the CLI evaluates all of its 1%% held out)")
    parser.add_argument("--table-every", type=int, default=250, help="rows of the printed table")
    parser.add_argument("--generator-width", type=float, default=0.25)
    parser.add_argument("--discriminator-weight", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=0, help="initial weights, dropout and sampling (not the data)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (bertkit / hf sides)")
    parser.add_argument("--save", help="bertkit side: save its discriminator folder here (for `bertkit finetune`)")
    parser.add_argument("--json", help="write every side's log here")
    parser.add_argument("--report", nargs="+", metavar="JSON", help="print one table of earlier --json files, run "
                        "nothing")
    args = parser.parse_args()
    if args.report:
        runs = [json.loads(Path(path).read_text()) for path in args.report]
        for run in runs:
            for result in run["results"]:
                print(f"{result['name']}: {result['steps']} steps, median step {result['median_step_ms']:.0f} ms "
                      f"({run['args']['threads']} thread(s), sides at once: {', '.join(run['args']['sides'])})")
        print(table([result for run in runs for result in run["results"]], args.table_every))
        return 0
    Path(args.work).mkdir(parents=True, exist_ok=True)
    if (args.temperature != 1.0 or args.seed) and "cli" in ([args.side] if args.side else args.sides):
        parser.error("--temperature / --seed: the cli side runs the preset's seed 0 without a sampling temperature")
    if args.side:
        result = run_cli(args) if args.side == "cli" else run_side(args)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    from machine import cpu_description

    data_and_model(args)                 # the tokenizer and the shards, once, before the sides start
    name = f"w{args.generator_width:g} l{args.discriminator_weight:g}" + (
        f" t{args.temperature:g}" if args.temperature != 1.0 else "") + (f" seed {args.seed}" if args.seed else "")
    jobs, logs = {}, {}
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    for side in args.sides:
        logs[side] = Path(args.work) / f"{side}-{name.replace(' ', '-')}.out"
        jobs[side] = subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--side", side],
                                      stdout=logs[side].open("w"), stderr=subprocess.STDOUT, env=env)
    results = []
    for side, job in jobs.items():
        if job.wait() != 0:
            raise SystemExit(f"{side} failed; see {logs[side]}:\n" + logs[side].read_text()[-3000:])
        line = [ln for ln in logs[side].read_text().splitlines() if ln.startswith("RESULT ")][-1]
        result = json.loads(line[len("RESULT "):])
        result["name"] = f"{side} ({name})"
        results.append(result)
    print(f"CPU: {cpu_description()}; {args.threads} thread(s) per side, sides run at once: {', '.join(args.sides)}")
    for result in results:
        print(f"{result['name']}: {result['steps']} steps, median step {result['median_step_ms']:.0f} ms")
    print(table(results, args.table_every))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_description(), "args": vars(args), "results": results},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
