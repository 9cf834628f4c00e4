"""`bertkit serve` under honest load while an attacker sends injection and slow-client payloads.

    python benchmarks/attack_load.py --data ../shared/data/bbc_train.jsonl.gz --queries ../shared/data/bbc_dev.jsonl.gz \\
        --clients 30 --seconds 60

1. An index of the BBC training articles (title + first paragraph, metadata `label`) is built with MiniLM
   (`bertkit index build`, the real CLI), and `bertkit serve --model MINILM --index INDEX` starts as its own
   process with its default limits.
2. Honest clients: N threads, each on its own keep-alive connection, alternate POST /encode (1-4 dev texts)
   and POST /search (a dev title, k 10, half of them filtered on one label) until --seconds pass. An error is
   any non-200 answer, a transport failure, a wrong vector count, or a filtered search that returns a
   document of another label (what a filter injection would do).
3. Attacker, during the attack phase only: one thread sends the SQL payloads in filter field names (a filter
   bypass, an endless recursive query, DROP TABLE, quotes) and a 100,000-value filter in a loop; --slow
   connections send their request headers one byte every --byte-interval seconds; --slow-bodies connections
   send complete headers and then their body one byte at a time; --idle connections send nothing. Each slow
   connection is re-opened as soon as the server closes it. Reported: what the server answered each payload
   and how long it held slow connections.
4. A quiet phase (same honest clients, no attacker) runs first for comparison, unless --no-quiet.
Only 127.0.0.1 is contacted. The clients, the attacker and the server share this machine's CPU.
"""
from __future__ import annotations

import argparse
import gzip
import http.client
import importlib.util
import json
import os
import random
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from machine import cpu_description


# benchmarks/serve.py (server start-up, client threads), loaded by path: imported as `serve` it would
# shadow the tests' serve folder.
_spec = importlib.util.spec_from_file_location("serve_benchmark", Path(__file__).with_name("serve.py"))
serve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve)

INJECTIONS = {
    "filter bypass": "' || char(34)) IS NULL OR 1=1 OR (1 = '",
    "endless recursive query": ("' || char(34)) IS NULL OR (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 "
                                "FROM c) SELECT max(x) FROM c) OR (1 = '"),
    "drop table": "label'); DROP TABLE documents; --",
    "quote and backslash": 'label"\\',
}


class Record:
    """Thread-safe tallies of one phase."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.attacks: dict[str, Counter] = defaultdict(Counter)
        self.held_s: dict[str, list[float]] = defaultdict(list)

    def ok(self, endpoint: str, seconds: float) -> None:
        with self.lock:
            self.latency[endpoint].append(seconds)

    def error(self, message: str) -> None:
        with self.lock:
            self.errors.append(message[:200])

    def attack(self, kind: str, outcome: str, held: float | None = None) -> None:
        with self.lock:
            self.attacks[kind][outcome] += 1
            if held is not None:
                self.held_s[kind].append(held)


def post(connection: http.client.HTTPConnection, path: str, body: dict) -> tuple[int, dict]:
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
    return response.status, json.loads(payload) if payload else {}


def honest_client(port: int, stop_at: float, texts: list[str], queries: list[str], labels: list[str],
                  record: Record, seed: int) -> None:
    rng = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    turn = seed
    while time.perf_counter() < stop_at:
        turn += 1
        started = time.perf_counter()
        try:
            if turn % 2:
                batch = rng.sample(texts, rng.randint(1, 4))
                status, answer = post(connection, "/encode", {"texts": batch, "truncate": True,
                                                              "encoding_format": "base64"})
                if status != 200 or len(answer.get("results", ())) != len(batch):
                    raise ValueError(f"/encode HTTP {status}: {str(answer)[:150]}")
                endpoint = "/encode"
            else:
                label = rng.choice(labels) if rng.random() < 0.5 else None
                body = {"query": rng.choice(queries), "k": 10, **({"filter": {"label": label}} if label else {})}
                status, answer = post(connection, "/search", body)
                if status != 200 or len(answer.get("results", ())) != 10:
                    raise ValueError(f"/search HTTP {status}: {str(answer)[:150]}")
                if label and any(hit["metadata"].get("label") != label for hit in answer["results"]):
                    raise ValueError(f"/search filtered on {label} returned another label")
                endpoint = "/search"
        except Exception as err:  # noqa: BLE001 - every failure is an honest-client error
            record.error(f"{type(err).__name__}: {err}")
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            continue
        record.ok(endpoint, time.perf_counter() - started)


def injector(port: int, stop_at: float, record: Record) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    payloads = [(name, {field: "x"}) for name, field in INJECTIONS.items()]
    payloads.append(("100,000-value filter", {"label": [f"v{i}" for i in range(100_000)]}))
    while time.perf_counter() < stop_at:
        for name, search_filter in payloads:
            try:
                status, answer = post(connection, "/search", {"query": "markets", "k": 10, "filter": search_filter})
                outcome = f"HTTP {status}" + (f" ({len(answer['results'])} hits)" if status == 200 else "")
            except Exception as err:  # noqa: BLE001 - what the attacker saw
                outcome = type(err).__name__
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            record.attack(name, outcome)
            time.sleep(0.05)


def slow_connection(port: int, stop_at: float, record: Record, kind: str, byte_interval: float) -> None:
    """Keep one slow connection open at all times: dribble (or send nothing), note how the server ends it."""
    head = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    while time.perf_counter() < stop_at:
        opened = time.perf_counter()
        sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        if kind == "slow headers":
            pending = head + b"X-Pad: " + b"a" * 100_000
        elif kind == "slow body":
            sock.sendall(head + b"Content-Length: 100000\r\n\r\n")
            pending = b'{"query": "' + b"a" * 99_000
        else:
            pending = b""
        outcome = None
        while outcome is None and time.perf_counter() < stop_at:
            if pending:
                try:
                    sock.sendall(pending[:1])
                    pending = pending[1:]
                except OSError:
                    outcome = "closed by server"
                    break
            if select.select([sock], [], [], byte_interval)[0]:
                try:
                    answer = sock.recv(65536)
                    outcome = answer.split(b"\r\n", 1)[0].decode("latin-1") if answer else "closed by server"
                except OSError:
                    outcome = "closed by server"
        sock.close()
        if outcome is None:
            record.attack(kind, "still open at the end", time.perf_counter() - opened)
        else:
            record.attack(kind, outcome, time.perf_counter() - opened)


def run_phase(port: int, seconds: float, clients: int, texts: list[str], queries: list[str], labels: list[str],
              attack: dict | None) -> dict:
    """One phase: honest clients (and the attacker when `attack` is given) until `seconds` pass."""
    record = Record()
    stop_at = time.perf_counter() + seconds
    threads = [threading.Thread(target=honest_client, args=(port, stop_at, texts, queries, labels, record, i))
               for i in range(clients)]
    if attack:
        threads.append(threading.Thread(target=injector, args=(port, stop_at, record)))
        for kind, count in (("slow headers", attack["slow"]), ("slow body", attack["slow_bodies"]),
                            ("idle", attack["idle"])):
            threads += [threading.Thread(target=slow_connection, args=(port, stop_at, record, kind,
                                                                        attack["byte_interval"]))
                        for _ in range(count)]
    wall = serve.run_threads(threads)
    summary = {"seconds": round(wall, 1), "honest_errors": len(record.errors), "first_errors": record.errors[:3]}
    for endpoint, values in sorted(record.latency.items()):
        p50, p99 = np.percentile(np.asarray(values) * 1000, [50, 99])
        summary[endpoint] = {"requests": len(values), "p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1)}
    summary["attacks"] = {kind: dict(outcomes) for kind, outcomes in record.attacks.items()}
    summary["slow_connection_held_s"] = {
        kind: {"median": round(float(np.median(v)), 2), "max": round(float(np.max(v)), 2)}
        for kind, v in record.held_s.items()}
    return summary


def read_rows(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def short_text(article: str) -> str:
    """Title and first paragraph of a BBC article."""
    return "\n".join(article.split("\n\n")[:2])


def build_index(model: str, rows: list[dict], folder: Path) -> None:
    documents = folder.parent / "documents.jsonl"
    with open(documents, "w", encoding="utf-8") as handle:
        for i, row in enumerate(rows):
            handle.write(json.dumps({"id": f"bbc-{i}", "text": short_text(row["text"]), "label": row["label"]}) + "\n")
    subprocess.run([sys.executable, "-m", "bertkit", "index", "build", "--model", model, "--input", str(documents),
                    "--index", str(folder)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the MiniLM PyPI package)")
    parser.add_argument("--data", default="../shared/data/bbc_train.jsonl.gz", help="documents to index")
    parser.add_argument("--queries", default="../shared/data/bbc_dev.jsonl.gz", help="texts and queries")
    parser.add_argument("--index", default=None, help="an index built with --model (default: build one)")
    parser.add_argument("--clients", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument("--slow", type=int, default=20, help="slow-header connections held open at once")
    parser.add_argument("--slow-bodies", type=int, default=5, help="slow-body connections held open at once")
    parser.add_argument("--idle", type=int, default=5, help="connections that send nothing, held open at once")
    parser.add_argument("--byte-interval", type=float, default=0.5, help="seconds between a slow client's bytes")
    parser.add_argument("--no-quiet", action="store_true", help="skip the phase without an attacker")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the server")
    parser.add_argument("--server-args", default="", help="extra `bertkit serve` flags, space-separated")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    from bertkit.api import minilm_path

    if args.threads:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    model = args.model or str(minilm_path())
    dev = read_rows(args.queries)
    texts = [short_text(row["text"]) for row in dev]
    queries = [row["text"].split("\n", 1)[0] for row in dev]          # the titles
    rows = read_rows(args.data)
    labels = sorted({row["label"] for row in rows})
    report = {"machine": {"cpu": cpu_description(), "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
              "model": Path(model).name, "documents": len(rows), "clients": args.clients, "phases": {}}
    with tempfile.TemporaryDirectory() as scratch:
        index = args.index
        if index is None:
            index = str(Path(scratch) / "index")
            started = time.perf_counter()
            build_index(model, rows, Path(index))
            print(f"built the index of {len(rows)} documents in {time.perf_counter() - started:.0f} s", flush=True)
        port = serve.free_port()
        server = serve.start_server(model, port, ["--index", index, *args.server_args.split()])
        try:
            run_phase(port, 10, args.clients, texts, queries, labels, None)        # warm-up
            attack = {"slow": args.slow, "slow_bodies": args.slow_bodies, "idle": args.idle,
                      "byte_interval": args.byte_interval}
            for name, phase_attack in (("quiet", None), ("attack", attack)):
                if name == "quiet" and args.no_quiet:
                    continue
                result = run_phase(port, args.seconds, args.clients, texts, queries, labels, phase_attack)
                report["phases"][name] = result
                print(f"{name}: " + json.dumps(result), flush=True)
            status = serve.get_json(port, "/status")
            report["server"] = {"counters": status["counters"], "limits": status["limits"],
                                "index": status["index"]}
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("GET", "/health")
            report["health_after"] = connection.getresponse().status
        finally:
            server.terminate()
            server.wait(timeout=30)
    report["load_average_at_end"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\n{report['machine']['cpu']}, {report['machine']['cpus']} CPUs; load average "
          f"{report['machine']['load_average_at_start'][0]:.1f} -> {report['load_average_at_end'][0]:.1f}; "
          f"{args.clients} honest clients, {args.seconds:g} s per phase; index of {len(rows)} documents; "
          f"documents in the index after the attack: {report['server']['index']['documents']}; "
          f"/health after: {report['health_after']}")
    print("\n| phase | honest errors | /search requests | search p50 ms | search p99 ms | /encode requests | "
          "encode p50 ms | encode p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, phase in report["phases"].items():
        search, encode = phase.get("/search", {}), phase.get("/encode", {})
        print(f"| {name} | {phase['honest_errors']} | {search.get('requests', 0)} | {search.get('p50_ms')} | "
              f"{search.get('p99_ms')} | {encode.get('requests', 0)} | {encode.get('p50_ms')} | "
              f"{encode.get('p99_ms')} |")
    attack_phase = report["phases"].get("attack", {})
    print("\n| attack | server's answers | connection held (median / max s) |")
    print("|---|---|---:|")
    for kind, outcomes in attack_phase.get("attacks", {}).items():
        held = attack_phase["slow_connection_held_s"].get(kind)
        shown = ", ".join(f"{outcome} x{count}" for outcome, count in sorted(outcomes.items()))
        held_text = f"{held['median']} / {held['max']}" if held else "-"
        print(f"| {kind} | {shown} | {held_text} |")
    print(f"\nserver counters: {json.dumps(report['server']['counters'])}")


if __name__ == "__main__":
    main()
