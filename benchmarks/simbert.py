"""SimBERT on the Bible paraphrase pairs: after `bertkit finetune --task simbert`, do its sampled paraphrases of a
King James verse, ranked by its own vectors, rank the true modern (World English Bible) verse higher than chance?

    python benchmarks/simbert.py --data-dir ../shared/data --max-train-examples 2400 --batch-size 16 \
        --max-length 96 --lr 1e-4 --test-pairs 200 --samples 5 --json simbert.json

Training: run_simbert_finetune (what `bertkit finetune --task simbert` runs) from --model (default all-MiniLM-L6-v2,
which has no MLM head: SimBERT adds one over the tied word embeddings) on a seeded random sample of
bible_pairs_train (text_a KJV, text_b WEB; train and test hold different books), [CLS] pooling, no dev set.

Evaluation on a seeded sample of N test pairs; the collection is all 2,990 test WEB verses (M). "Rank" is the
1-based position of the pair's own WEB verse among the M by cosine (ties count against it), so chance is a mean
rank of (M + 1) / 2 = 1,495.5 and an MRR of H_M / M = 0.0029.
1. Retrieval, the KJV verse as the query: by the SimBERT model's vectors, by MiniLM's own (mean pooling, no
   SimBERT training) and by TF-IDF (lowercased words, benchmarks/unilm.py's index).
2. Generation: --samples paraphrases of each KJV verse (top-p 0.95, seeded), ranked by the model's cosine to the
   KJV verse (SimBertGenerator.rank, what `bertkit generate --similar` prints). The best-ranked one is the
   query: its rank of the true WEB verse by three judges: TF-IDF fitted on the M test WEB verses and the ORIGINAL
   all-MiniLM-L6-v2 (frozen, mean pooling), which do not depend on the model being trained and so cannot be
   pleased by a sample only it finds close, and the SimBERT model's own vectors. Each mean rank comes with its
   standard error; chance is (M + 1) / 2 +- sqrt((M^2 - 1) / 12 / N). Beside it: the first sample, a random and
   the worst-ranked sample, greedy decoding, and the KJV verse itself (copy the input). Text overlap with the
   true WEB verse: chrF (character 1-6-grams, beta 2) and token F1 (lowercased words). --examples (KJV,
   generated, true WEB) triples are printed and kept in --json.
3. Repetition, over every drawn sample (and the greedy text): the share of texts in which some word bigram occurs
   twice, distinct-2 (distinct word bigrams / word bigrams, per text, averaged; Li et al. 2016) and the mean
   length in words. --repetition N:P ... evaluates each decoding setting (no-repeat n-gram size N, repetition
   penalty P; `bertkit generate --similar --no-repeat-ngram-size N --repetition-penalty P`) on the same verses and
   seeds, side by side:

    python benchmarks/simbert.py --skip-training --output runs/simbert_minilm --threads 1 --test-pairs 100 \
        --samples 5 --repetition 0:1.0 2:1.0 3:1.0 0:1.2 3:1.2
"""
from __future__ import annotations

from bertkit.job_config import job_config
import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from machine import cpu_description
from unilm import TfidfIndex, read_rows, words, write_training_pairs


def chrf(hypothesis: str, reference: str, max_n: int = 6, beta: float = 2.0) -> float:
    """chrF (Popovic 2015): character n-gram F-beta averaged over n = 1..6, spaces removed; 0-100."""
    hyp, ref = hypothesis.replace(" ", ""), reference.replace(" ", "")
    precisions, recalls = [], []
    for n in range(1, max_n + 1):
        h = Counter(hyp[i:i + n] for i in range(len(hyp) - n + 1))
        r = Counter(ref[i:i + n] for i in range(len(ref) - n + 1))
        if not h or not r:
            continue
        common = sum((h & r).values())
        precisions.append(common / sum(h.values()))
        recalls.append(common / sum(r.values()))
    if not precisions:
        return 0.0
    p, r = float(np.mean(precisions)), float(np.mean(recalls))
    return 0.0 if p + r == 0 else 100 * (1 + beta ** 2) * p * r / (beta ** 2 * p + r)


def token_f1(hypothesis: str, reference: str) -> float:
    h, r = Counter(words(hypothesis)), Counter(words(reference))
    common = sum((h & r).values())
    if not common:
        return 0.0
    p, rec = common / sum(h.values()), common / sum(r.values())
    return 2 * p * rec / (p + rec)


def rank_summary(ranks: np.ndarray) -> dict:
    """Mean rank with its standard error (sample sd / sqrt(N)), median, MRR, recall@1/10."""
    se = float(ranks.std(ddof=1) / np.sqrt(len(ranks))) if len(ranks) > 1 else float("nan")
    return {"mean_rank": float(ranks.mean()), "se_mean_rank": se, "median_rank": float(np.median(ranks)),
            "mrr": float((1.0 / ranks).mean()), "recall@1": float((ranks == 1).mean()),
            "recall@10": float((ranks <= 10).mean()), "n": int(len(ranks))}


def chance_summary(collection: int, queries: int) -> dict:
    """A uniformly random rank among M: mean (M + 1) / 2, sd sqrt((M^2 - 1) / 12), so a mean over N queries has
    standard error sd / sqrt(N); MRR H_M / M."""
    return {"mean_rank": (collection + 1) / 2, "se_mean_rank": float(np.sqrt((collection ** 2 - 1) / 12 / queries)),
            "mrr": float(sum(1.0 / k for k in range(1, collection + 1)) / collection)}


JUDGES = ("rank_by_tfidf", "rank_by_minilm", "rank_by_simbert")


def repetition_stats(texts: list[str]) -> dict:
    """Share of texts with a word bigram (trigram) occurring twice or more, mean distinct-2 (texts with a bigram)
    and mean length in words. Natural text repeats bigrams ("of the"), rarely trigrams: compare with the WEB
    verses' own figures."""
    repeated, repeated3, distinct, lengths = [], [], [], []
    for text in texts:
        tokens = words(text)
        bigrams = list(zip(tokens, tokens[1:]))
        trigrams = list(zip(tokens, tokens[1:], tokens[2:]))
        lengths.append(len(tokens))
        repeated.append(len(set(bigrams)) < len(bigrams))
        repeated3.append(len(set(trigrams)) < len(trigrams))
        if bigrams:
            distinct.append(len(set(bigrams)) / len(bigrams))
    return {"repeated_bigram_share": float(np.mean(repeated)), "repeated_trigram_share": float(np.mean(repeated3)),
            "distinct_2": float(np.mean(distinct)), "mean_words": float(np.mean(lengths)), "texts": len(texts)}


def parse_setting(text: str) -> tuple[int, float]:
    """"N:P" -> (no-repeat n-gram size N, repetition penalty P)."""
    try:
        size, penalty = text.split(":")
        return int(size), float(penalty)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--repetition wants N:P (e.g. 3:1.2), got {text!r}") from None


def setting_name(setting: tuple[int, float]) -> str:
    return f"no-repeat {setting[0]}, penalty {setting[1]:g}"


def markdown_table(generation: dict, chance: dict) -> str:
    """Mean rank +- standard error by each judge (the two independent ones first), and the text overlap."""
    lines = ["| query | mean rank, TF-IDF | MRR | mean rank, MiniLM frozen | MRR | mean rank, SimBERT's own | MRR "
             "| chrF | token F1 |", "|---|" + "---:|" * 8]
    c = f"{chance['mean_rank']:,.1f} +- {chance['se_mean_rank']:.0f} | {chance['mrr']:.4f}"
    lines.append(f"| chance | {c} | {c} | {c} | | |")
    for name, row in generation.items():
        cells = [f"{row[j]['mean_rank']:,.1f} +- {row[j]['se_mean_rank']:.1f} | {row[j]['mrr']:.4f}" for j in JUDGES]
        lines.append(f"| {name} | {' | '.join(cells)} | {row['chrF']:.1f} | {row['token_f1']:.3f} |")
    return "\n".join(lines)


def paired_difference(ranks: list[int], baseline: list[int]) -> str:
    """Mean of the per-verse rank differences (same verses, same seeds) +- their standard error."""
    diff = np.asarray(ranks, dtype=float) - np.asarray(baseline, dtype=float)
    se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    return f"{diff.mean():+,.1f} +- {se:.1f}"


def repetition_table(settings: dict) -> str:
    """Per decoding setting: the best-ranked sample by the two independent judges (mean rank +- standard error,
    and the paired difference to the first setting, same verses and seeds), and the repetition figures."""
    lines = ["| setting | best-ranked: mean rank, TF-IDF | vs first setting | mean rank, MiniLM frozen | vs first "
             "setting | chrF | vs first setting | all samples: repeated bigram | repeated trigram | distinct-2 | words | greedy: mean "
             "rank, TF-IDF | MiniLM frozen | repeated trigram | distinct-2 |", "|---|" + "---:|" * 14]
    baseline = next(iter(settings.values()))["ranks_per_verse"]["best-ranked sample"]
    for name, row in settings.items():
        best, greedy = row["generation"]["best-ranked sample"], row["generation"]["greedy decoding"]
        samples, greedy_rep = row["repetition"]["all samples"], row["repetition"]["greedy decoding"]
        own = row["ranks_per_verse"]["best-ranked sample"]
        lines.append(
            f"| {name} | {best['rank_by_tfidf']['mean_rank']:,.1f} +- {best['rank_by_tfidf']['se_mean_rank']:.1f} "
            f"| {paired_difference(own['rank_by_tfidf'], baseline['rank_by_tfidf'])} "
            f"| {best['rank_by_minilm']['mean_rank']:,.1f} +- {best['rank_by_minilm']['se_mean_rank']:.1f} "
            f"| {paired_difference(own['rank_by_minilm'], baseline['rank_by_minilm'])} "
            f"| {best['chrF']:.1f} | {paired_difference(own['chrF'], baseline['chrF'])} "
            f"| {samples['repeated_bigram_share']:.3f} "
            f"| {samples['repeated_trigram_share']:.3f} | {samples['distinct_2']:.3f} "
            f"| {samples['mean_words']:.1f} "
            f"| {greedy['rank_by_tfidf']['mean_rank']:,.1f} +- {greedy['rank_by_tfidf']['se_mean_rank']:.1f} "
            f"| {greedy['rank_by_minilm']['mean_rank']:,.1f} +- {greedy['rank_by_minilm']['se_mean_rank']:.1f} "
            f"| {greedy_rep['repeated_trigram_share']:.3f} | {greedy_rep['distinct_2']:.3f} |")
    return "\n".join(lines)


def model_ranks(model, queries: list[str], corpus_vectors: np.ndarray, owns: np.ndarray) -> np.ndarray:
    """Rank of corpus row owns[i] for query i by cosine of `model.encode` vectors (ties count against it)."""
    q = model.encode(queries, batch_size=64)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    scores = q @ corpus_vectors.T                                            # (N, M)
    own = scores[np.arange(len(queries)), owns]
    return (scores >= own[:, None]).sum(axis=1)


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def train(args, output: Path) -> dict:
    from bertkit.finetune.seq2seq.simbert import SimBertConfig, run_simbert_finetune

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        count = write_training_pairs(args.data_dir, args.seed, args.max_train_examples, path)
        config = job_config(SimBertConfig, model=args.model, train=str(path), output=str(output), epochs=args.epochs,
                               lr=args.lr, batch_size=args.batch_size, max_length=args.max_length,
                               seed=args.seed if args.train_seed is None else args.train_seed,
                               progress_bar=False, precision=args.precision, pooling=args.pooling,
                               time_budget=args.time_budget)
        started = time.perf_counter()
        result = run_simbert_finetune(config)
    return {"train_pairs": count, "epochs": result.epochs, "steps": result.steps,
            "train_seconds": result.train_seconds, "wall_seconds": time.perf_counter() - started}


def generate_choices(generator, sources: list[str], targets: list[str], args,
                     setting: tuple[int, float]) -> tuple[dict, list[str], list[dict]]:
    """Each verse's samples (seeded per verse, so every setting sees the same seeds) -> the texts each choice
    keeps, every drawn sample, and --examples triples."""
    from bertkit.generate.sampling import GREEDY

    control = {"no_repeat_ngram_size": setting[0], "repetition_penalty": setting[1]}
    choices: dict[str, list[str]] = {"best-ranked sample": [], "first sample": [], "random sample": [],
                                     "worst-ranked sample": [], "greedy decoding": []}
    drawn_all, examples = [], []
    pick = random.Random(args.seed + 1)
    for k, source in enumerate(sources):
        drawn = [s for s in generator.sample(source, args.samples, max_new_tokens=args.max_new_tokens,
                                             seed=args.seed + k, **control) if s.strip()] or [source]
        drawn_all.extend(drawn)
        ranked = generator.rank(source, drawn)
        choices["best-ranked sample"].append(ranked[0].text)
        choices["worst-ranked sample"].append(ranked[-1].text)
        choices["first sample"].append(drawn[0])
        choices["random sample"].append(pick.choice(drawn))
        choices["greedy decoding"].append(generator.sample(source, 1, GREEDY, args.max_new_tokens, **control)[0]
                                          or source)
        if k < args.examples:
            examples.append({"kjv": source, "generated (best-ranked of the samples)": ranked[0].text,
                             "web": targets[k], "greedy": choices["greedy decoding"][-1]})
            print(f"KJV: {source}\nbest: {ranked[0].text} ({ranked[0].cosine:.3f})\nWEB: {targets[k]}\n"
                  f"first: {drawn[0]}\ngreedy: {choices['greedy decoding'][-1]}\n", flush=True)
    choices["KJV verse (copy the input)"] = list(sources)
    return choices, drawn_all, examples


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", default=None, help="folder to start from (default: the MiniLM PyPI package)")
    parser.add_argument("--output", type=Path, default=None, help="the SimBERT folder (default: temp)")
    parser.add_argument("--skip-training", action="store_true", help="evaluate --output as it is")
    parser.add_argument("--max-train-examples", type=int, default=2400)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--time-budget", default=None, help="e.g. 5m: train for this wall-clock time instead")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=16, help="pairs per batch (two rows each)")
    parser.add_argument("--max-length", type=int, default=96, help="[CLS] a [SEP] b [SEP] tokens")
    parser.add_argument("--pooling", default="cls")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="bf16")
    parser.add_argument("--test-pairs", type=int, default=200)
    parser.add_argument("--samples", type=int, default=5, help="paraphrases drawn per test verse")
    parser.add_argument("--collection", type=int, default=None,
                        help="WEB verses to rank among (default: all 2,990 test verses; fewer: the test pairs' "
                             "own verses plus a seeded random sample of the rest)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--examples", type=int, default=5, help="(KJV, generated, true WEB) triples to print")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-seed", type=int, default=None,
                        help="the training order's seed (default --seed; the test pairs stay those of --seed): "
                             "another one when continuing from a folder trained with --seed")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice); 1 is "
                                                                    "faster on a machine shared with other jobs")
    parser.add_argument("--repetition", type=parse_setting, nargs="+", default=None, metavar="N:P",
                        help="decoding settings to compare: no-repeat n-gram size N and repetition penalty P "
                             "(default: the generator's DEFAULT_REPETITION only)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch
    if args.threads:
        torch.set_num_threads(args.threads)

    import bertkit
    from bertkit.api import minilm_path
    from bertkit.finetune.seq2seq.simbert import DEFAULT_REPETITION, SimBertGenerator

    args.model = args.model or str(minilm_path())
    print(f"cpu: {cpu_description()}; torch threads {torch.get_num_threads()}; load "
          f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    report: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory() as tmp:
        output = args.output or Path(tmp) / "simbert"
        if not args.skip_training:
            report["training"] = train(args, output)
            print(json.dumps(report["training"]), flush=True)

        test = read_rows(args.data_dir / "bible_pairs_test.jsonl.gz")
        rng = random.Random(args.seed)
        picked = sorted(rng.sample(range(len(test)), args.test_pairs))
        if args.collection and args.collection < len(test):     # the picked pairs' verses + random others
            others = rng.sample(sorted(set(range(len(test))) - set(picked)), args.collection - len(picked))
            kept = sorted(picked + others)
            position = {index: k for k, index in enumerate(kept)}
            test, picked = [test[i] for i in kept], [position[i] for i in picked]
        modern = [r["text_b"] for r in test]                                   # the collection, M verses
        sources = [test[i]["text_a"] for i in picked]
        owns = np.array(picked)
        tfidf = TfidfIndex(modern)
        chance = chance_summary(len(modern), len(sources))
        retrieval = {"chance": chance, "tfidf": rank_summary(tfidf.ranks(sources, list(owns))[0])}
        simbert = bertkit.load(output)
        minilm = bertkit.load(minilm_path())
        started = time.perf_counter()
        simbert_corpus = unit(simbert.encode(modern, batch_size=64))
        minilm_corpus = unit(minilm.encode(modern, batch_size=64))
        retrieval["minilm (mean pooling, no SimBERT)"] = rank_summary(model_ranks(minilm, sources, minilm_corpus,
                                                                                 owns))
        retrieval["simbert"] = rank_summary(model_ranks(simbert, sources, simbert_corpus, owns))
        report["retrieval_kjv_query"] = retrieval
        report["encode_seconds"] = time.perf_counter() - started
        print(json.dumps(retrieval, indent=1), flush=True)

        generator = SimBertGenerator(output)
        targets = [modern[i] for i in owns]
        settings = args.repetition or [(DEFAULT_REPETITION.no_repeat_ngram_size,
                                        DEFAULT_REPETITION.repetition_penalty)]
        report["settings"] = {}
        for setting in settings:
            name = setting_name(setting)
            print(f"== {name}", flush=True)
            started = time.perf_counter()
            choices, drawn_all, examples = generate_choices(generator, sources, targets, args, setting)
            generation, per_verse = {}, {}
            for choice, texts in choices.items():
                ranks = {"rank_by_simbert": model_ranks(simbert, texts, simbert_corpus, owns),
                         "rank_by_tfidf": tfidf.ranks(texts, list(owns))[0],
                         "rank_by_minilm": model_ranks(minilm, texts, minilm_corpus, owns)}
                per_verse[choice] = {judge: [int(r) for r in values] for judge, values in ranks.items()}
                per_verse[choice]["chrF"] = [chrf(t, g) for t, g in zip(texts, targets)]
                generation[choice] = {
                    **{judge: rank_summary(values) for judge, values in ranks.items()},
                    "chrF": float(np.mean([chrf(t, g) for t, g in zip(texts, targets)])),
                    "token_f1": float(np.mean([token_f1(t, g) for t, g in zip(texts, targets)]))}
            repetition = {"all samples": repetition_stats(drawn_all),
                          "best-ranked sample": repetition_stats(choices["best-ranked sample"]),
                          "greedy decoding": repetition_stats(choices["greedy decoding"]),
                          "WEB verse (reference)": repetition_stats(targets)}
            report["settings"][name] = {"generation": generation, "repetition": repetition, "examples": examples,
                                        "generate_seconds": time.perf_counter() - started,
                                        "ranks_per_verse": per_verse,
                                        "texts": {"all samples": drawn_all,
                                                  **{c: choices[c] for c in ("best-ranked sample", "greedy decoding")}}}
            print(json.dumps(repetition, indent=1), flush=True)
            if args.json:                                   # after each setting: a long run keeps what it measured
                args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            print(f"N = {len(sources)} test pairs, M = {len(modern)} WEB verses; +- = standard error of the mean rank")
            print(markdown_table(generation, chance), flush=True)
        report["collection"] = len(modern)
        print(f"\nN = {len(sources)}, {args.samples} samples a verse; best-ranked = what `generate --similar` prints "
              "first; +- = standard error of the mean rank")
        print(repetition_table(report["settings"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
