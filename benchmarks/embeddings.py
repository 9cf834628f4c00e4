"""Whitening and unsupervised SimCSE on an MLM-only bertkit model, measured by retrieval.

    python benchmarks/embeddings.py --data-dir ../shared/data --work /tmp/embeddings --budget 10m --simcse-steps 250

1. Pre-trains a small MLM-only BERT (WordPiece vocab trained on the Bible train verses, hidden 128, 2 layers)
   with the shared training loop for --budget of wall-clock time.
2. Evaluates KJV -> WEB verse retrieval on the test split (recall@1/10, MRR@10, nDCG@10) for: CLS and mean
   pooling, mean + BERT-whitening (fitted on 20k train sentences), mean after unsupervised SimCSE.
"""
import argparse
import gzip
import json
import random
import time
from pathlib import Path

import torch

from bertkit.job_config import job_config
from bertkit.api import load
from bertkit.checkpoints import save_checkpoint
from bertkit.embed.evaluation import evaluate_model
from bertkit.embed.simcse import SimCSEConfig, run_simcse
from bertkit.embed.whitening import whiten_model
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.tokenizer.train import train_wordpiece
from bertkit.train import IndexedBatches, TrainConfig, train

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
parser.add_argument("--work", type=Path, default=Path("/tmp/embeddings"))
parser.add_argument("--budget", default="8m", help="MLM pre-training wall-clock budget")
parser.add_argument("--simcse-steps", type=int, default=250)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()
torch.set_num_threads(args.threads)
data, out, budget, steps = args.data_dir, args.work, args.budget, args.simcse_steps
out.mkdir(parents=True, exist_ok=True)

# --- 1. an MLM-only model ---
rows = [json.loads(l) for l in gzip.open(str(data / "bible_pairs_train.jsonl.gz"), "rt", encoding="utf-8")]
texts = [r["text_a"] for r in rows] + [r["text_b"] for r in rows]
(out / "bible_train.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
test = [json.loads(l) for l in gzip.open(str(data / "bible_pairs_test.jsonl.gz"), "rt", encoding="utf-8")]
(out / "bible_test_pairs.jsonl").write_text("\n".join(json.dumps({"text_a": r["text_a"], "text_b": r["text_b"]}) for r in test) + "\n")
tok = train_wordpiece([out / "bible_train.txt"], vocab_size=8000, lowercase=True)
torch.manual_seed(0)
config = EncoderConfig(vocab_size=tok.vocab_size, hidden_size=128, num_layers=2, num_heads=2,
                       intermediate_size=512, max_position_embeddings=128)
encoder, head = Encoder(config), MaskedLMHead(config)
ids = tok.encode_batch(texts, max_length=48).input_ids
print("texts", len(texts), "vocab", tok.vocab_size, flush=True)

class MLM(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.encoder, self.head = encoder, head
    def forward(self, input_ids, attention_mask, positions):
        hidden = self.encoder(input_ids, attention_mask).last_hidden_state
        return self.head(hidden[positions], self.encoder.embeddings.token.weight)

special = torch.tensor(sorted(tok.special_ids))
def make_batch(indices, epoch):
    b = pad_to_tensors([ids[i] for i in indices], tok.pad_id)
    x = b["input_ids"]
    candidates = b["attention_mask"].bool() & ~torch.isin(x, special)
    chosen = candidates & (torch.rand(x.shape) < 0.15)
    labels = x[chosen]
    r = torch.rand(x.shape)
    x = x.clone()
    x[chosen & (r < 0.8)] = tok.mask_id
    rand = chosen & (r >= 0.8) & (r < 0.9)
    x[rand] = torch.randint(len(tok.special_ids) + 100, tok.vocab_size, (int(rand.sum()),))
    return {"input_ids": x, "attention_mask": b["attention_mask"], "positions": chosen, "labels": labels}

def loss_fn(net, batch):
    logits = net(batch["input_ids"], batch["attention_mask"], batch["positions"])
    loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
    acc = float((logits.argmax(-1) == batch["labels"]).float().mean())
    return loss, {"mlm_acc": acc}

model = MLM()
batches = IndexedBatches(len(ids), 64, make_batch, seed=0, drop_last=True)
t = time.time()
result = train(model, loss_fn, batches, TrainConfig(lr=5e-4, warmup_steps=200, time_budget=budget, schedule="linear",
                                                    weight_decay=0.01, device="cpu", output_dir=str(out / "mlm_run"),
                                                    progress_bar=False, log_every=100))
print("steps", result.steps, "loss first/last", result.losses[:1], sum(result.losses[-50:]) / 50, time.time() - t)
save_checkpoint(out / "mlm_model", encoder.eval(), tok, heads={"mlm": head}, meta={"task": "mlm"})
print("saved", out / "mlm_model")

# --- 2. retrieval: raw pooling, whitening, SimCSE ---
base = out / "mlm_model"
test = out / "bible_test_pairs.jsonl"
lines = (out / "bible_train.txt").read_text(encoding="utf-8").splitlines()
random.Random(0).shuffle(lines)
(out / "bible_train_20k.txt").write_text("\n".join(lines[:20000]) + "\n", encoding="utf-8")
results = {}

def record(name, folder, **kw):
    t = time.time()
    r = evaluate_model(load(folder), pairs=test, **kw)["pairs_retrieval"]
    results[name] = r
    print(name, json.dumps({k: round(v, 4) for k, v in r.items()}), f"({time.time()-t:.0f}s)", flush=True)

record("mlm mean", base, pooling="mean")
record("mlm cls", base, pooling="cls")
t = time.time()
whiten_model(load(base), out / "bible_train_20k.txt", out / "mlm_white", pooling="mean")
print("whiten fit", time.time() - t, flush=True)
record("mlm mean + whitening", out / "mlm_white")
whiten_model(load(base), out / "bible_train_20k.txt", out / "mlm_white128", dim=128, pooling="mean")
record("mlm mean + whitening k=128", out / "mlm_white128")
t = time.time()
res = run_simcse(job_config(SimCSEConfig, model=str(base), train=str(out / "bible_train_20k.txt"), output=str(out / "mlm_simcse"),
                              batch_size=64, max_steps=steps, lr=1e-4, max_length=48, progress_bar=False, device="cpu"))
print("simcse", res.steps, "steps", time.time() - t, "s; loss first/last", res.losses[0], sum(res.losses[-20:]) / 20, flush=True)
record("mlm + unsup SimCSE (mean)", out / "mlm_simcse")
(out / "embed_results.json").write_text(json.dumps(results, indent=2))
