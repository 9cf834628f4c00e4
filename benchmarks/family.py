"""ELECTRA and XLNet on CPU: bertkit vs transformers, the same random weights (no weights are downloadable), the
same batch, one process, interleaved rounds, median seconds per call.

    python benchmarks/family.py --rounds 5

Cases (batch of random token ids, a quarter of each odd row padded: on the left for XLNet, as transformers pads
it, on the right for ELECTRA; two segments):
  electra-small discriminator forward: ElectraForPreTraining, ELECTRA-small shapes (embedding 128 projected to
    hidden 256, 12 layers, 4 heads), logits per token;
  xlnet forward: XLNetModel, XLNet-base shapes (768 wide, 12 heads; --xlnet-layers layers), content stream;
  xlnet two-stream step: XLNetLMHeadModel forward + backward with perm_mask and target_mapping from
    bertkit.model.permutation (1/6 of each row predicted), cross-entropy over the targets, dropout off.
Prints the CPU, threads, load, seconds per call for each side, transformers / bertkit, and the max abs difference
of the outputs (and of the gradients of the word embeddings for the training step).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from machine import cpu_description


def make_batch(vocab: int, batch: int, length: int, left: bool, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, vocab, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    types[:, length // 2:] = 1
    for row in range(1, batch, 2):
        pad = length // 4
        if left:
            mask[row, :pad] = 0
        else:
            mask[row, length - pad:] = 0
    return ids, mask, types


def saved(model, root: Path, name: str) -> Path:
    folder = root / name
    model.save_pretrained(str(folder))
    return folder


def electra_case(root: Path, args):
    from transformers import ElectraConfig, ElectraForPreTraining

    from bertkit.checkpoints import load_checkpoint

    torch.manual_seed(0)
    reference = ElectraForPreTraining(ElectraConfig(
        vocab_size=30522, embedding_size=128, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=512)).eval()
    checkpoint = load_checkpoint(saved(reference, root, "electra"))
    encoder, head = checkpoint.encoder.eval(), checkpoint.heads["discriminator"].eval()
    ids, mask, types = make_batch(30522, args.batch, args.length, left=False)

    def ours():
        with torch.inference_mode():
            return head(encoder(ids, mask, types).last_hidden_state)

    def theirs():
        with torch.inference_mode():
            return reference(input_ids=ids, attention_mask=mask, token_type_ids=types).logits

    real = mask.bool()
    return ours, theirs, lambda a, b: (a - b)[real].abs().max().item()


def xlnet_config(args):
    from transformers import XLNetConfig

    return XLNetConfig(vocab_size=32000, d_model=768, n_layer=args.xlnet_layers, n_head=12, d_inner=3072,
                       dropout=0.0)


def xlnet_forward_case(root: Path, args):
    from transformers import XLNetModel

    from bertkit.checkpoints import load_checkpoint

    torch.manual_seed(0)
    reference = XLNetModel(xlnet_config(args)).eval()
    encoder = load_checkpoint(saved(reference, root, "xlnet")).encoder.eval()
    ids, mask, types = make_batch(32000, args.batch, args.length, left=True)

    def ours():
        with torch.inference_mode():
            return encoder(ids, mask, types).last_hidden_state

    def theirs():
        with torch.inference_mode():
            return reference(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

    real = mask.bool()
    return ours, theirs, lambda a, b: (a - b)[real].abs().max().item()


def xlnet_step_case(root: Path, args):
    from transformers import XLNetLMHeadModel

    from bertkit.checkpoints import load_checkpoint
    from bertkit.model.permutation import permutation_targets

    torch.manual_seed(0)
    reference = XLNetLMHeadModel(xlnet_config(args)).eval()             # eval: dropout off on both sides
    checkpoint = load_checkpoint(saved(reference, root, "xlnet-lm"))
    encoder, head = checkpoint.encoder.eval(), checkpoint.heads["lm"].eval()
    ids, mask, types = make_batch(32000, args.batch, args.length, left=True)
    targets = permutation_targets(mask.bool(), k=6, rng=torch.Generator().manual_seed(0))
    used = targets.target_positions >= 0
    labels = ids.gather(1, targets.target_positions.clamp(min=0))[used]

    def ours():
        encoder.zero_grad(set_to_none=True)
        out = encoder(ids, mask, types, perm_mask=targets.perm_mask, target_mapping=targets.target_mapping)
        logits = head(out.query_hidden_state, encoder.embeddings.token.weight)
        torch.nn.functional.cross_entropy(logits[used], labels).backward()
        return encoder.embeddings.token.weight.grad

    def theirs():
        reference.zero_grad(set_to_none=True)
        logits = reference(input_ids=ids, attention_mask=mask, token_type_ids=types, perm_mask=targets.perm_mask,
                           target_mapping=targets.target_mapping).logits
        torch.nn.functional.cross_entropy(logits[used], labels).backward()
        return reference.transformer.word_embedding.weight.grad

    return ours, theirs, lambda a, b: (a - b).abs().max().item()


CASES = {"electra-small discriminator forward": electra_case, "xlnet forward": xlnet_forward_case,
         "xlnet two-stream step (fwd+bwd)": xlnet_step_case}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--xlnet-layers", type=int, default=12)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*loads without a tokenizer")   # weights-only folders
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_description()}; torch {torch.__version__}; threads {torch.get_num_threads()}; "
          f"batch {args.batch} x {args.length}; load at start {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        cases = {name: build(Path(tmp), args) for name, build in CASES.items()}
        diffs = {}
        for name, (ours, theirs, diff) in cases.items():             # warm-up, and the agreement of the outputs
            diffs[name] = diff(ours(), theirs())
        times: dict[str, dict[str, list[float]]] = {name: {"bertkit": [], "transformers": []} for name in cases}
        for round_ in range(args.rounds):
            for name, (ours, theirs, _) in cases.items():
                sides = [("bertkit", ours), ("transformers", theirs)]
                for side, call in sides if round_ % 2 == 0 else sides[::-1]:
                    start = time.perf_counter()
                    call()
                    times[name][side].append(time.perf_counter() - start)
    print(f"load at end {os.getloadavg()[0]:.2f}; median of {args.rounds} interleaved rounds")
    print("| case | bertkit s | transformers s | bertkit is | max abs diff |")
    print("|---|---:|---:|---:|---:|")
    for name in cases:
        ours, theirs = (statistics.median(times[name][side]) for side in ("bertkit", "transformers"))
        print(f"| {name} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x | {diffs[name]:.1e} |")


if __name__ == "__main__":
    main()
