"""Batch-1 greedy generation of an lm run: speculative decoding with one or more draft runs against
plain greedy decoding, and int8 weights against fp32, in tokens per second.

    python benchmarks/speculative.py TARGET_RUN DRAFT_RUN [DRAFT_RUN ...]   # ~2 min a draft, 2 quiet cores
    python benchmarks/speculative.py --quick      # a smoke run on tiny runs it trains
    python benchmarks/speculative.py TARGET_RUN DRAFT_RUN --threads 1 --clock cpu

A draft is an lm run of the target's tokenizer: trained on the same text (``vaswani train lm
--layers 2 --d-model 128 --heads 4 --d-ff 512``), or distilled from the target for the purpose
(``vaswani train lm --distill-from TARGET_RUN ...``: the target's greedy continuations). Each prompt
is generated ``--tokens`` new tokens greedily, batch 1, by every configuration in turn (interleaved
rounds, so that a change of the machine's load hits all alike): plain fp32, speculative fp32 with
each draft (adaptive k, and each ``--draft-tokens``), plain int8, speculative int8 with each draft.
It checks that the fp32 speculative ids are the fp32 greedy ids (and counts the int8 generations
equal to int8 greedy's: quantizing each activation row, int8 can part at a near-tie), prints the acceptance
rates, the medians of the per-round ratios, the CPU's model and flags, and a markdown table.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import quick
import torch
from timing import add_clock_flag, clock, cpu_description, use_clock

from vaswani.generation.config import DecodingConfig
from vaswani.layers.quantize import quantize_int8
from vaswani.pipelines.lm import LanguageModel

Generation = Callable[[str, list[int]], list[int]]
"""A prompt and a tally (accepted, proposed draft tokens) → the generated ids."""

PROMPTS = [
    "The for statement",
    "A class definition",
    "The import statement",
    "Exceptions are raised",
    "The with statement",
    "Function definitions",
]


def timed(run: Generation, prompt: str, tally: list[int]) -> tuple[float, list[int]]:
    """Seconds of one generation on the chosen clock, and its ids."""
    start = clock()
    ids = run(prompt, tally)
    return clock() - start, ids


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("target", type=Path, nargs="?")
    parser.add_argument("drafts", type=Path, nargs="*", metavar="draft")
    parser.add_argument("--tokens", type=int, default=100, help="new tokens a prompt (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the prompts (default 3)")
    parser.add_argument("--draft-tokens", type=int, nargs="*", default=[4], help="fixed k to time too")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: tiny runs, two prompts, 40 tokens, one round"
    )
    add_clock_flag(parser)
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory()
    if args.quick:  # a character-level target, drafts of half its width: trained on its text, distilled
        folder = Path(scratch.name)
        args.target = quick.train("lm", folder / "target", "--tokenizer", "char")
        args.drafts = [
            quick.train("lm", folder / "draft", "--tokenizer", "char", "--d-model", "16"),
            quick.train("lm", folder / "distilled", "--distill-from", str(args.target), "--d-model", "16"),
        ]
    elif args.target is None or not args.drafts:
        parser.error("give TARGET_RUN and at least one DRAFT_RUN (or --quick)")
    use_clock(args.clock)
    torch.set_num_threads(args.threads)
    prompts, tokens, rounds = (PROMPTS[:2], 40, 1) if args.quick else (PROMPTS, args.tokens, args.rounds)
    target = LanguageModel.load(args.target, "cpu")
    names = [path.name for path in args.drafts]  # a draft is named by its folder (and its parent's)
    if len(set(names)) < len(names):
        names = [f"{path.parent.name}/{path.name}" for path in args.drafts]
    drafts = {
        name: LanguageModel.load(path, "cpu").model for name, path in zip(names, args.drafts, strict=True)
    }
    target8 = LanguageModel(quantize_int8(copy.deepcopy(target.model)), target.tokenizer)
    drafts8 = {name: quantize_int8(copy.deepcopy(model)) for name, model in drafts.items()}
    decoding = DecodingConfig(max_new_tokens=tokens)
    sizes = {name: sum(p.numel() for p in m.parameters()) for name, m in {"": target.model, **drafts}.items()}

    def plain(lm: LanguageModel) -> Generation:
        return lambda prompt, tally: lm.tokenizer.encode(lm.generate([prompt], decoding)[0])

    def drafted(lm: LanguageModel, small: torch.nn.Module, k: int | None) -> Generation:
        def run(prompt: str, tally: list[int]) -> list[int]:
            text = lm.generate([prompt], decoding, draft=small, draft_tokens=k)[0]
            assert lm.speculation is not None
            tally[0] += lm.speculation.accepted
            tally[1] += lm.speculation.proposed
            return lm.tokenizer.encode(text)

        return run

    configs: dict[str, Generation] = {"fp32": plain(target)}
    for name, draft in drafts.items():
        configs[f"fp32 + {name} (adaptive k)"] = drafted(target, draft, None)
        configs.update({f"fp32 + {name} (k={k})": drafted(target, draft, k) for k in args.draft_tokens})
    configs["int8"] = plain(target8)
    for name, draft in drafts8.items():
        configs[f"int8 + {name} (adaptive k)"] = drafted(target8, draft, None)
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    produced: dict[str, int] = dict.fromkeys(configs, 0)
    accepted: dict[str, list[int]] = {name: [0, 0] for name in configs}
    int8_agree = [0, 0]
    int8_same: dict[str, list[int]] = {name: [0, 0] for name in configs if name.startswith("int8 +")}
    for prompt in prompts:
        configs["fp32"](prompt, [0, 0])  # warm-up
    for r in range(rounds):
        for prompt in prompts:
            names = list(configs) if r % 2 == 0 else list(reversed(configs))
            ids: dict[str, list[int]] = {}
            for name in names:
                s, ids[name] = timed(configs[name], prompt, accepted[name])
                seconds[name].append(s)
                produced[name] += len(ids[name])
            for name in configs:
                if name.startswith("fp32"):  # the target's greedy ids, up to floating-point rounding
                    assert ids[name] == ids["fp32"], f"{name}: ids differ from fp32 on {prompt!r}"
                elif name != "int8":  # int8 ids may part at a near-tie: a rounding moves a row's scale
                    same = ids[name] == ids["int8"]
                    int8_same[name][0] += same
                    int8_same[name][1] += 1
                    if not same:
                        pairs = zip(ids[name], ids["int8"], strict=False)  # one may end sooner
                        int8_same[name].append(next((i for i, (a, b) in enumerate(pairs) if a != b), -1))
            n = min(len(ids["int8"]), len(ids["fp32"]))
            int8_agree[0] += sum(a == b for a, b in zip(ids["int8"][:n], ids["fp32"][:n], strict=True))
            int8_agree[1] += n
    rate = {name: produced[name] / sum(seconds[name]) for name in configs}
    per_prompt = {name: seconds[name] for name in configs}
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"CPU: {cpu_description()}")
    print(
        f"torch {torch.__version__}, {args.threads} threads, {args.clock} clock, load {' '.join(load)}, "
        f"{datetime.date.today()}; target {sizes['']:,} parameters; {len(prompts)} prompts x {rounds} "
        f"rounds, {tokens} new tokens, batch 1"
    )
    for name in drafts:
        print(f"draft {name}: {sizes[name]:,} parameters ({sizes[name] / sizes['']:.2f} of the target)")
    print("\n| configuration | tokens/s | vs fp32 (median per prompt) | acceptance |")
    print("|---|---:|---:|---:|")
    for name in configs:
        ratios = [b / a for a, b in zip(per_prompt[name], per_prompt["fp32"], strict=True)]
        acc = accepted[name]
        share = f"{acc[0] / acc[1]:.1%}" if acc[1] else ""
        print(f"| {name} | {rate[name]:,.1f} | {statistics.median(ratios):.2f} | {share} |")
    print()
    for name in drafts:
        on_int8 = per_prompt[f"int8 + {name} (adaptive k)"]
        int8_plain = [b / a for a, b in zip(on_int8, per_prompt["int8"], strict=True)]
        print(f"int8 + {name} vs int8: {statistics.median(int8_plain):.2f}")
    print("fp32 speculative ids = fp32 greedy ids: yes (checked for every prompt and round)")
    for name, (same, runs, *firsts) in int8_same.items():
        where = f"; the first different token at {firsts}" if firsts else ""
        print(f"{name}: the int8 greedy ids in {same} of {runs} generations{where}")
    print(f"int8 ids equal to fp32 ids at {int8_agree[0]} of {int8_agree[1]} positions")


if __name__ == "__main__":
    main()
