"""A sentence-transformers backend (onnx or openvino) in its own virtual environment, driven by
benchmarks/encode_precision.py over stdin/stdout so its rounds interleave with the in-process ones.

Protocol: load, encode every text once (warm-up; the vectors go to --vectors as .npy), print "ready"; then per
stdin line "go" encode again and print {"seconds": ...}; "quit" ends. These backends pin other transformers
versions than bertkit's environment, hence the separate interpreter, e.g.

    python -m venv --system-site-packages /work/venvs/ov
    /work/venvs/ov/bin/pip install -c <(echo torch==2.13.0) "optimum-intel[openvino]"   # then: pip uninstall torchvision
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--backend", choices=("onnx", "openvino"), required=True)
    parser.add_argument("--texts", required=True, help="one text per line")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--vectors", required=True, help=".npy file for the warm-up's vectors")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    if args.backend == "openvino":
        kwargs = {"ov_config": {"INFERENCE_NUM_THREADS": str(args.threads)}}
    else:
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        kwargs = {"session_options": options, "provider": "CPUExecutionProvider"}
    model = SentenceTransformer(args.model, device="cpu", backend=args.backend, model_kwargs=kwargs)
    with open(args.texts, encoding="utf-8") as handle:
        texts = handle.read().split("\n")[:-1]

    def encode():
        return model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)

    np.save(args.vectors, encode())
    print("ready", flush=True)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        started = clock()
        encode()
        print(json.dumps({"seconds": clock() - started}), flush=True)


if __name__ == "__main__":
    main()
