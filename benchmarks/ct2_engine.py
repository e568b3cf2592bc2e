"""CTranslate2 in a process of its own, for ``ct2_speed.py``.

A Python process that has imported torch shares torch's OpenMP runtime with every library it
loads after (torch loads ``libgomp`` globally, so CTranslate2's parallel regions resolve to the
same one). Two engines in one process are then two OpenMP masters, each with its pool of
threads; once their threads outnumber the cores, libgomp stops spinning between parallel
regions (``gomp_managed_threads > gomp_available_cpus``), and every region of either engine pays
a sleeping worker's wake-up. On 2 cores at 2 threads that halved both engines' rates: vaswani int8
beam 4 at batch 32 fell from 590 to 345 tokens/s after one CTranslate2 pass, CTranslate2's own
rate moved between 410 and 1,100. Deployed, each engine runs alone, so here each CTranslate2
translator runs in a child process that never imports torch (:class:`CT2Process`), and times its
own passes.

The child reads one JSON request a line on stdin (the batches as tokens, the beam, the length
penalty, each batch's decoding budget, the suppressed sequences) and writes one JSON answer a
line: the seconds the pass took and each batch's best hypotheses (tokens), or ``{"error": ...}``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class CT2Process:
    """A CTranslate2 ``Translator`` of ``folder`` (``compute_type``, ``threads`` intra-op threads)
    in a child process; :meth:`translate` runs one pass, :meth:`close` (or ``with``) ends it."""

    def __init__(self, folder: Path, compute_type: str, threads: int) -> None:
        code = "import ct2_engine; ct2_engine.serve()"
        self._child = subprocess.Popen(
            [sys.executable, "-c", code, str(folder), compute_type, str(threads)],
            cwd=HERE,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def translate(
        self, batches: list[list[list[str]]], beam: int, alpha: float, limits: list[int],
        suppressed: list[list[str]] | None,
    ) -> tuple[float, list[list[list[str]]]]:  # fmt: skip
        """The seconds of one pass over ``batches`` (source tokens) in the child, and the best
        hypothesis (tokens, ``</s>`` kept where it ended one) of each sentence, batch by batch."""
        assert self._child.stdin is not None and self._child.stdout is not None
        request = {"batches": batches, "beam": beam, "alpha": alpha, "limits": limits}
        self._child.stdin.write(json.dumps({**request, "suppressed": suppressed}) + "\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError(f"the CTranslate2 process ended (exit status {self._child.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"CTranslate2: {answer['error']}")
        return answer["seconds"], answer["hypotheses"]

    def close(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait()

    def __enter__(self) -> CT2Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve() -> None:
    """The child's loop (``sys.argv``: folder, compute type, threads); see the module docstring."""
    import ctranslate2

    folder, compute_type, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    translator = ctranslate2.Translator(
        folder, device="cpu", compute_type=compute_type, intra_threads=threads
    )
    for line in sys.stdin:
        try:
            answer: dict[str, Any] = run_pass(translator, json.loads(line))
        except Exception as exc:  # reported to the parent, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


def run_pass(translator: Any, request: dict[str, Any]) -> dict[str, Any]:
    """One timed pass of ``translator`` over the request's batches."""
    start = time.perf_counter()
    found = []
    for tokens, limit in zip(request["batches"], request["limits"], strict=True):
        results = translator.translate_batch(
            tokens,
            beam_size=request["beam"],
            length_penalty=request["alpha"],
            max_decoding_length=limit,
            max_batch_size=len(tokens),
            suppress_sequences=request["suppressed"],
            return_end_token=True,
        )
        found.append([result.hypotheses[0] for result in results])
    return {"seconds": time.perf_counter() - start, "hypotheses": found}
