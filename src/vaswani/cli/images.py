"""``vaswani classify-image``: the predicted classes of image files with a trained ``image`` run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vaswani.cli.common import add_device_flag, add_run_command
from vaswani.errors import ConfigError


def add_parsers(commands: Any) -> None:
    p = add_run_command(
        commands,
        "classify-image",
        help="classify image files with a trained ViT",
        description="Print each IMAGE's most likely class and its probability, tab-separated (with "
        "--top-k K, the K most likely, best first). Each image is read with Pillow, converted to the "
        "run's channels and preprocessed as in training (RUN_DIR/preprocessor_config.json).",
    )
    p.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="image files (.png, .jpg...)")
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="classes shown per image (default 1)")
    p.add_argument("--batch-size", type=int, default=64)
    add_device_flag(p)
    p.set_defaults(handler=cmd_classify_image)


def cmd_classify_image(args: argparse.Namespace) -> None:
    from vaswani.tasks import registry

    if args.top_k < 1:
        raise ConfigError(f"--top-k must be >= 1, got {args.top_k}")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    spec = registry.spec_of(args.run_dir, ["image"], "vaswani classify-image")
    classifier = spec.load(args.run_dir, device=args.device)
    for path, best in zip(args.images, classifier.predict(args.images, args.top_k), strict=True):
        print("\t".join([str(path), *(f"{name}\t{p:.4f}" for name, p in best)]))
