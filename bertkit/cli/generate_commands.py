"""`bertkit generate` (text from a GPT-2-style folder, streamed; with --source, the target of a UniLM seq2seq
folder; with --similar, a SimBERT folder's paraphrases ranked by its own vectors) and `bertkit vocab-bpe`
(byte-level BPE)."""
from __future__ import annotations

import argparse
import sys

from bertkit.cli.flags import add_deprecated_flag, check_repetition_flags
from bertkit.errors import BertkitError


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="continue a prompt with a GPT-2-style causal LM (or --source: seq2seq)",
                              description="Continue a prompt with a GPT-2-style model folder (HF GPT-2 layout), "
                                          "printing tokens as they are chosen. Greedy unless --temperature, "
                                          "--top-k or --top-p asks for sampling. With --source, decode the "
                                          "target of a folder from `bertkit finetune --task seq2seq` (UniLM, "
                                          "greedy or --num-beams beam search, key/value cache); `bertkit "
                                          "predict` does it for a file. With --similar, sample paraphrases "
                                          "from a `bertkit finetune --task simbert` folder and print the -n "
                                          "closest to the input by its own sentence vectors (cosine<TAB>text).")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="GPT-2 folder (config.json, weights, tokenizer), or a seq2seq folder with --source")
    p.add_argument("--prompt", default=None, help="text to continue (empty: start a new document)")
    p.add_argument("--source", default=None, help="seq2seq folders: the source text to generate a target for")
    p.add_argument("--similar", default=None, metavar="TEXT",
                   help="SimBERT folders: sample paraphrases of TEXT (top-p 0.95 unless --top-k/--top-p/"
                        "--temperature say otherwise; no repeated 3-gram unless --no-repeat-ngram-size says "
                        "otherwise) and rank them by cosine to TEXT")
    p.add_argument("-n", type=int, default=5, help="--similar: how many paraphrases to print (default 5)")
    p.add_argument("--samples", type=int, default=None,
                   help="--similar: how many to draw before dropping repeats and ranking (default: -n)")
    p.add_argument("--max-new-tokens", type=int, default=50, help="most tokens to add (default 50)")
    p.add_argument("--temperature", type=float, default=None,
                   help="0 = greedy; default 1.0 when --top-k/--top-p is given, else greedy")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling: smallest set with probability p")
    p.add_argument("--seed", type=int, default=None, help="random seed for sampling (repeatable output)")
    p.add_argument("--num-beams", type=int, default=1,
                   help="--source only: beam search with this many beams (default 1 = greedy)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=None, metavar="N",
                   help="never repeat an N-gram of the text generated (--prompt: of the prompt and the text); "
                        "default 0 = off, --similar: 3")
    p.add_argument("--repetition-penalty", type=float, default=None, metavar="P",
                   help="CTRL's penalty on tokens already generated (--prompt: or in the prompt): their logits "
                        "are divided by P when positive, multiplied when negative; 1.0 = off (default, --similar "
                        "too), 1.2 as in the CTRL paper")
    p.add_argument("--no-cache", dest="use_cache", action="store_false",
                   help="recompute the whole sequence each step instead of using the key/value cache")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.set_defaults(func=run_generate)

    v = subparsers.add_parser("vocab-bpe", help="train a GPT-2 byte-level BPE vocab on text files",
                              description="Train a byte-level BPE vocabulary (GPT-2 style, <|endoftext|> last) "
                                          "on text files (UTF-8, .gz accepted) and write vocab.json, merges.txt, "
                                          "tokenizer.json and tokenizer_config.json, as HF GPT-2 folders hold.")
    v.add_argument("--corpus", nargs="+", metavar="FILE", help="text files (required)")
    add_deprecated_flag(v, "--input", "--corpus")
    v.add_argument("--output", required=True, metavar="DIR", help="folder to write the tokenizer files into")
    v.add_argument("--vocab-size", type=int, default=50257, help="tokens incl. <|endoftext|> (default 50257)")
    v.add_argument("--min-frequency", type=int, default=2, help="least count for a merge (default 2)")
    v.add_argument("--encoding", default="utf-8", help="input file encoding")
    v.set_defaults(func=run_vocab_bpe)


def run_generate(args: argparse.Namespace) -> int:
    from bertkit.checkpoints.gpt2 import load_gpt2
    from bertkit.generate import SamplingConfig, TextStream, generate
    from bertkit.runtime import pick_device

    if args.max_new_tokens < 0:
        raise BertkitError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    if args.num_beams < 1:
        raise BertkitError(f"--num-beams must be >= 1 (1 = greedy), got {args.num_beams}")
    check_repetition_flags(args)
    if args.similar is not None:
        return run_similar_generate(args)
    if args.source is not None:
        return run_seq2seq_generate(args)
    if args.num_beams != 1:
        raise BertkitError("--num-beams is for seq2seq folders (--source); GPT-2 generation is greedy or sampled")
    from bertkit.finetune.loop_job import saved_task
    if saved_task(args.model) == "seq2seq":
        raise BertkitError(f"{args.model} is a seq2seq model: give --source TEXT instead of --prompt")
    args.prompt = args.prompt or ""
    temperature = args.temperature
    if temperature is None:
        temperature = 1.0 if (args.top_k is not None or args.top_p is not None) else 0.0
    sampling = SamplingConfig(temperature=temperature, top_k=args.top_k, top_p=args.top_p)
    checkpoint = load_gpt2(args.model)
    tokenizer = checkpoint.tokenizer
    if tokenizer is None:
        raise BertkitError(f"{args.model}: no tokenizer files (tokenizer.json or vocab.json + merges.txt)")
    model = checkpoint.model.to(pick_device(args.device))
    prompt_ids = tokenizer.encode(args.prompt) if args.prompt else [tokenizer.eos_id]

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    write(args.prompt)
    stream = TextStream(tokenizer.decode, write)
    result = generate(model, prompt_ids, args.max_new_tokens, sampling, eos_id=tokenizer.eos_id, seed=args.seed,
                      use_cache=args.use_cache, on_token=stream.add, **_repetition(args, 0, 1.0))
    stream.finish()
    write("\n")
    print(f"bertkit: {len(result.token_ids)} tokens, stopped by {result.stop_reason}", file=sys.stderr)
    return 0


def run_seq2seq_generate(args: argparse.Namespace) -> int:
    from bertkit.finetune.seq2seq.job import Seq2SeqGenerator

    if args.prompt is not None:
        raise BertkitError("--prompt continues a GPT-2 model's text and --source decodes a seq2seq model: give one")
    sampling = [f for f, v in (("--temperature", args.temperature), ("--top-k", args.top_k), ("--top-p", args.top_p))
                if v is not None]
    if sampling:
        raise BertkitError(f"{sampling[0]}: seq2seq decoding is greedy or beam search (no sampling); drop it")
    generator = Seq2SeqGenerator(args.model, args.device)
    print(generator.decode([args.source], args.max_new_tokens, args.use_cache, num_beams=args.num_beams,
                           **_repetition(args, 0, 1.0))[0])
    return 0


def run_similar_generate(args: argparse.Namespace) -> int:
    from bertkit.generate import SamplingConfig
    from bertkit.finetune.seq2seq.simbert import DEFAULT_REPETITION, DEFAULT_SAMPLING, SimBertGenerator

    if args.prompt is not None or args.source is not None:
        raise BertkitError("--similar ranks a SimBERT model's paraphrases; drop --prompt / --source")
    if args.num_beams != 1:
        raise BertkitError("--similar samples its paraphrases; --num-beams is for --source")
    sampling = DEFAULT_SAMPLING
    if (args.temperature, args.top_k, args.top_p) != (None, None, None):
        sampling = SamplingConfig(temperature=1.0 if args.temperature is None else args.temperature,
                                  top_k=args.top_k, top_p=args.top_p)
    generator = SimBertGenerator(args.model, args.device)
    found = generator.similar(args.similar, args.n, args.samples, sampling, args.max_new_tokens, args.seed,
                              **_repetition(args, DEFAULT_REPETITION.no_repeat_ngram_size,
                                            DEFAULT_REPETITION.repetition_penalty))
    for item in found:
        print(f"{item.cosine:.4f}\t{item.text}")
    if len(found) < args.n:
        print(f"bertkit: {len(found)} distinct paraphrases (repeats, empty texts and copies of the input are "
              "dropped); draw more with --samples", file=sys.stderr)
    return 0


def _repetition(args: argparse.Namespace, no_repeat_ngram_size: int, repetition_penalty: float) -> dict:
    """The repetition flags as keyword arguments, the given defaults where a flag was not given."""
    return {"no_repeat_ngram_size": no_repeat_ngram_size if args.no_repeat_ngram_size is None
            else args.no_repeat_ngram_size,
            "repetition_penalty": repetition_penalty if args.repetition_penalty is None else args.repetition_penalty}


def run_vocab_bpe(args: argparse.Namespace) -> int:
    from bertkit.tokenizer.bpe import train_bpe

    if not args.corpus:
        raise BertkitError("vocab-bpe needs --corpus FILE [FILE ...]")
    tokenizer = train_bpe(args.corpus, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                          encoding=args.encoding)
    tokenizer.save(args.output)
    print(f"trained a byte-level BPE vocab of {tokenizer.vocab_size} tokens on {len(args.corpus)} file(s) -> "
          f"{args.output} (vocab.json, merges.txt, tokenizer.json, tokenizer_config.json)", file=sys.stderr)
    return 0
