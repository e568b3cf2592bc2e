"""Load test of ``vaswani serve``: real servers on 127.0.0.1, bounded, stopping by themselves.

``python benchmarks/serve_load.py`` (about 5 minutes on 2 busy cores; ``--quick``: about half a minute)
trains a small translation run and a small language model (or takes ``--translation-run`` and
``--lm-run``), then, each server a ``vaswani serve`` process of its own:

1. **translation load**: ``--requests`` greedy ``/v1/translations`` requests (one sentence each,
   of the embedded grammar corpus) from ``--clients`` concurrent clients, once with batching
   (``--max-batch 16``) and once one at a time (``--max-batch 1``): 5xx, other errors, lost
   responses, responses that are not the direct translation of their own input (swapped or
   duplicated), p50/p99 latency and throughput;
2. **completion load**: the same for greedy ``/v1/completions`` (continuous batching against one
   at a time), where a duplicated response would repeat a completion ``id``;
3. **generation speed** of one client: tokens/s of ``/v1/completions`` (whole and streamed)
   against ``LanguageModel.generate`` in this process, and against a FastAPI app calling Hugging
   Face ``generate`` with ``TextIteratorStreamer`` (``hf_serve.py``) on the same weights
   (``vaswani export-hf``); rounds interleaved, medians.

It prints the CPU, torch, the threads and a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from timing import cpu_description, record

from vaswani.data.grammar import generate_pairs
from vaswani.generation.config import DecodingConfig
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.translation import Translator

HOST = "127.0.0.1"
ENV = dict(os.environ)  # of every process started: OMP_NUM_THREADS set by --threads
PIDS: dict[int, int] = {}  # port → the process of the server listening there
PROMPTS = ["The module", "A function that returns", "If the argument is", "This class", "When the file"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(command: list[str], port: int, ready_s: float = 180.0) -> Iterator[int]:
    """A server process started by ``command`` on ``port`` of 127.0.0.1, up once ``/health``
    answers 200; terminated (then killed) on leaving."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if process.poll() is not None:
                raise SystemExit(f"server {' '.join(command)} exited: {process.stderr.read()[-2000:]}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection(HOST, port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"server {' '.join(command)} did not answer /health in {ready_s:.0f} s")
            time.sleep(0.2)
        PIDS[port] = process.pid
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def vaswani_server(run: Path, max_batch: int) -> contextlib.AbstractContextManager[int]:
    port = free_port()
    command = [sys.executable, "-m", "vaswani", "serve", str(run), "--host", HOST, "--port", str(port),
               "--max-batch", str(max_batch), "--queue-size", "4096", "--device", "cpu"]  # fmt: skip
    return server(command, port)


def hf_server(folder: Path) -> contextlib.AbstractContextManager[int]:
    port = free_port()
    script = Path(__file__).resolve().parent / "hf_serve.py"
    return server([sys.executable, str(script), str(folder), "--port", str(port)], port)


def post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST ``body`` as JSON; the status and the decoded JSON answer (None when it is not JSON)."""
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, None


def stream(conn: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> str:
    """POST a streamed request and read its server-sent events to ``data: [DONE]``; the text."""
    conn.request("POST", path, json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    response = conn.getresponse()
    pieces = []
    while line := response.readline():
        line = line.strip()
        if line == b"data: [DONE]":
            break
        if line.startswith(b"data: "):
            pieces.append(json.loads(line[6:])["choices"][0]["text"])
    response.read()
    return "".join(pieces)


@dataclass
class Load:
    """What a load run counted."""

    requests: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_errors: int = 0  # 5xx
    other_errors: int = 0  # another status than 200
    lost: int = 0  # no answer: the connection failed or timed out
    wrong: int = 0  # an answer that is not its request's (another input's text, or a repeated id)
    tokens: int = 0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def load(port: int, path: str, bodies: list[dict[str, Any]], check: Callable[[int, Any], bool],
         clients: int) -> Load:  # fmt: skip
    """Send ``bodies`` from ``clients`` threads (each one kept-alive connection, the next body as
    soon as an answer is in); ``check(i, answer)`` says whether an answer is body i's."""
    result = Load(len(bodies))
    lock, cursor = threading.Lock(), iter(range(len(bodies)))

    def client() -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=120)
        while True:
            with lock:
                i = next(cursor, None)
            if i is None:
                break
            started = time.perf_counter()
            try:
                status, answer = post(conn, path, bodies[i])
            except (OSError, http.client.HTTPException):
                with lock:
                    result.lost += 1
                conn.close()
                conn = http.client.HTTPConnection(HOST, port, timeout=120)
                continue
            elapsed = time.perf_counter() - started
            with lock:
                result.latencies.append(elapsed)
                result.server_errors += status >= 500
                result.other_errors += status != 200 and status < 500
                if status == 200:
                    result.wrong += not check(i, answer)
                    result.tokens += (answer.get("usage") or {}).get("completion_tokens", 0)
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.seconds = time.perf_counter() - started
    return result


def train_runs(folder: Path, quick: bool) -> tuple[Path, Path]:
    """A small translation run (the default recipe's model, few steps, little data) and a small GPT
    (gpt-mini on the default text): the model shapes of the defaults, trained for a minute or two."""
    runs = folder / "translation", folder / "lm"
    steps = ("4", "4") if quick else ("150", "40")
    pairs = "500" if quick else "20000"
    small = ["--n-train", pairs, "--n-valid", "50", "--n-test", "50", "--eval-sentences", "20"]
    for task, out, n, extra in (("translation", runs[0], steps[0], small), ("lm", runs[1], steps[1], [])):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "vaswani", "train", task, "--out", str(out), "--max-steps", n,
             "--eval-every", "100000", "--quiet", *extra],
            check=True, stdout=subprocess.DEVNULL, env=ENV,
        )  # fmt: skip
        print(f"trained {task} ({n} steps) in {time.perf_counter() - started:.0f} s", flush=True)
    return runs


def translation_load(run: Path, args: argparse.Namespace) -> dict[int, Load]:
    sentences = [en for en, _ in generate_pairs(args.requests, seed=7)]
    greedy = DecodingConfig(max_new_tokens=args.max_tokens)
    expected = Translator.load(run, "cpu").translate(sentences, greedy, batch_size=1)
    bodies = [{"input": s, "max_tokens": args.max_tokens} for s in sentences]

    def check(i: int, answer: Any) -> bool:
        return answer["data"][0]["text"] == expected[i]

    loads = {}
    for batch in (16, 1):
        with vaswani_server(run, batch) as port:
            loads[batch] = load(port, "/v1/translations", bodies, check, args.clients)
        print(f"translation, max batch {batch}: {loads[batch].seconds:.1f} s", flush=True)
    return loads


def completion_load(run: Path, args: argparse.Namespace) -> dict[int, Load]:
    count = max(args.clients, args.requests // 4)
    bodies = [{"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": args.max_tokens} for i in range(count)]
    lm = LanguageModel.load(run, "cpu")
    greedy = DecodingConfig(max_new_tokens=args.max_tokens)
    expected = {p: lm.generate([p], greedy)[0] for p in PROMPTS}
    seen: set[str] = set()

    def check(i: int, answer: Any) -> bool:
        fresh = answer["id"] not in seen
        seen.add(answer["id"])
        return fresh and answer["choices"][0]["text"] == expected[bodies[i]["prompt"]]

    loads = {}
    for batch in (16, 1):
        seen.clear()
        with vaswani_server(run, batch) as port:
            loads[batch] = load(port, "/v1/completions", bodies, check, args.clients)
        print(f"completions, max batch {batch}: {loads[batch].seconds:.1f} s", flush=True)
    return loads


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, its finished threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn: Callable[[], Any], clock: Callable[[], float]) -> float:
    started = clock()
    fn()
    return clock() - started


def generation_speed(run: Path, folder: Path, args: argparse.Namespace) -> dict[str, float]:
    """Median tokens/s of one client, per way of generating the same greedy tokens."""
    lm = LanguageModel.load(run, "cpu")
    prompt = PROMPTS[0]
    greedy = DecodingConfig(max_new_tokens=args.max_tokens)
    body = {"prompt": prompt, "max_tokens": args.max_tokens}
    subprocess.run([sys.executable, "-m", "vaswani", "export-hf", str(run), str(folder / "hf")], check=True,
                   stdout=subprocess.DEVNULL, env=ENV)  # fmt: skip
    times: dict[str, list[float]] = {}
    with vaswani_server(run, 16) as ours, hf_server(folder / "hf") as theirs:

        def conn(port: int) -> http.client.HTTPConnection:  # a new one: an idle one is closed after 5 s
            return http.client.HTTPConnection(HOST, port, timeout=120)

        ways: dict[str, Callable[[], Any]] = {
            "direct generate": lambda: lm.generate([prompt], greedy),
            "vaswani serve": lambda: post(conn(ours), "/v1/completions", body),
            "vaswani serve, streamed": lambda: stream(conn(ours), "/v1/completions", body),
            "HF app": lambda: post(conn(theirs), "/v1/completions", body),
            "HF app, streamed": lambda: stream(conn(theirs), "/v1/completions", body),
        }
        clocks = dict.fromkeys(ways, time.perf_counter)
        if args.clock == "cpu":  # the CPU seconds of the process that generates
            clocks = {name: time.process_time if name == "direct generate" else
                      functools.partial(cpu_seconds, PIDS[theirs if name.startswith("HF") else ours])
                      for name in ways}  # fmt: skip
        tokens = ways["vaswani serve"]()[1]["usage"]["completion_tokens"]  # also a warm-up
        for fn in ways.values():
            fn()  # warm-up
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                times.setdefault(name, []).append(timed(ways[name], clocks[name]))
        _, answer = post(conn(theirs), "/v1/completions", body)
    hf_tokens = answer["usage"]["completion_tokens"]
    return {
        name: (hf_tokens if name.startswith("HF") else tokens) / statistics.median(values)
        for name, values in times.items()
    }


def load_rows(kind: str, loads: dict[int, Load]) -> list[str]:
    rows = []
    for batch, r in loads.items():
        how = "batched (max 16)" if batch > 1 else "one at a time"
        p50, p99 = 1000 * r.percentile(0.5), 1000 * r.percentile(0.99)
        rows.append(
            f"| {kind}, {how} | {r.requests} | {r.server_errors} | {r.other_errors} | {r.lost} | {r.wrong} "
            f"| {p50:.0f} | {p99:.0f} | {r.requests / r.seconds:.1f} |"
        )
    ratio = loads[16].seconds and loads[1].seconds / loads[16].seconds
    target = ">= 3" if kind == "translation" else ""
    rates = {batch: [r.requests / r.seconds] for batch, r in loads.items()}
    record(f"{kind} requests/s, 16 clients", "fp32", rates[16], rates[1], "one at a time", target, "batched")
    rows.append(f"| {kind}: batched / one at a time | | | | | | | | **{ratio:.2f}×** |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and training steps (smoke run)")
    parser.add_argument("--requests", type=int, default=600, help="translation requests per load run")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per request")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the generation-speed test")
    parser.add_argument("--translation-run", type=Path, help="a translation run (default: train one)")
    parser.add_argument("--lm-run", type=Path, help="an lm run (default: train one)")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="the generation-speed test's clock: wall seconds, or the CPU seconds of the "
        "generating process (this one, or the server), which neighbours barely inflate",
    )
    parser.add_argument("--speed-only", action="store_true", help="only the generation-speed test")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of every process (default 1: OpenMP threads that wait for each "
                        "other on a busy machine make 2 up to 30x slower)")  # fmt: skip
    args = parser.parse_args()
    ENV["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    if args.quick:
        args.requests, args.rounds = min(args.requests, 16), 1
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}", flush=True)  # fmt: skip
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.translation_run is None or args.lm_run is None:
            translation, lm = train_runs(folder, args.quick)
        translation = args.translation_run or translation
        lm = args.lm_run or lm
        loads = [] if args.speed_only else [("translation", translation_load(translation, args)),
                                            ("completions", completion_load(lm, args))]  # fmt: skip
        speed = generation_speed(lm, folder, args)
    print(f"\n{args.clients} clients, {args.max_tokens} tokens per request, greedy; "
          f"{time.perf_counter() - started:.0f} s in all\n")  # fmt: skip
    print(
        "| load | requests | 5xx | other errors | lost | wrong or duplicated | p50 ms | p99 ms | requests/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(row for kind, runs in loads for row in load_rows(kind, runs)))
    direct = speed["direct generate"]
    print(f"\n| one client, greedy, {args.clock} clock | tokens/s | / direct generate |\n|---|---:|---:|")
    for name, rate in speed.items():
        print(f"| {name} | {rate:.1f} | {rate / direct:.2f} |")
        if name.startswith("vaswani serve"):
            record(
                f"{name}, tokens/s, one client",
                "fp32",
                [rate],
                [direct],
                "direct generate",
                ">= 0.95",
                "server",
            )
            theirs = "HF app, streamed" if name.endswith("streamed") else "HF app"
            record(f"{name}, tokens/s, one client", "fp32", [rate], [speed[theirs]], theirs, "", "server")
    print(f"\nvaswani serve, streamed / HF app, streamed: "
          f"**{speed['vaswani serve, streamed'] / speed['HF app, streamed']:.2f}×**")  # fmt: skip


if __name__ == "__main__":
    main()
