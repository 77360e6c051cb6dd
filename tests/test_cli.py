"""The command lines: every subcommand's --help, unknown flags refused, bad values refused before work.

Each case runs ``python -m specbook ...`` in a subprocess with a timeout, the way a user types it.
The subprocesses start together (a few at a time) in one module fixture, since each pays for
importing torch.  Nothing may load: ``SPECBOOK_CACHE`` points below a plain file, so any attempt
to read or fetch the model fails at once with a traceback, which every case forbids; the
argument error itself must be argparse's ``usage:`` line, status 2, naming the flag.
"""
from __future__ import annotations

import argparse
import io
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from specbook import __main__ as cli
from specbook import cliargs
from specbook.progress import ENV, progress_enabled

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT_S = 240  # per command, on a loaded 2-core machine; a hang fails the case
HAS_BATCH = cli._module_exists("specbook.bench.batch")

HELP = {  # argv -> words its --help must show
    (): ["tour", "fetch-model", "bench", "batch", "gpu-check", "grading", "train"],
    ("tour",): ["usage: specbook tour", "--fast"],
    ("student-edition",): ["usage: specbook student-edition", "--out", "--no-assignments"],
    ("fetch-model",): ["usage: specbook fetch-model", "--cache", "--force", "--no-progress"],
    ("bench",): ["usage:", "--drafters", "--no-progress", "--plot", "--from-json"],
    ("gpu-check",): ["usage: specbook gpu-check", "--device", "--threads", "--allow-cpu"],
    ("grading",): ["usage:", "--null-reps"],
    ("train",): ["distill", "medusa", "eagle", "features", "notices", "everyday"],
    ("train", "distill"): ["usage: specbook train distill", "--layers", "--threads", "--out"],
    ("train", "medusa"): ["usage: specbook train medusa", "--heads", "--prompt-set"],
    ("train", "eagle"): ["usage: specbook train eagle", "--unroll", "--max-steps"],
    ("train", "features"): ["usage: specbook train features", "--out", "--train-prompts"],
    ("train", "everyday"): ["usage: specbook train everyday", "--base", "--count"],
}
if HAS_BATCH:
    HELP[("batch",)] = ["usage:"]

UNKNOWN = [("tour", "--fsat"), ("fetch-model", "--bogus"), ("bench", "--bogus"),
           ("gpu-check", "--device", "cpu", "--allow-cpu", "--bogus"), ("grading", "--bogus"),
           ("train", "eagle", "--bogus"), ("student-edition", "--out", "unused", "--bogus")]

BAD = {  # argv -> the words of the refusal ({blocker}: a plain file, so no directory can be made below it)
    ("gpu-check", "--device", "gpu"): "argument --device: must be a torch device",
    ("fetch-model", "--cache", "{blocker}/cache"): "argument --cache: cannot write",
    ("train", "distill", "--threads", "0"): "argument --threads: must be a whole number of threads >= 1",
    ("train", "medusa", "--prompt-set", "{blocker}.missing"): "argument --prompt-set: no such file",
    ("bench", "--from-json", "{blocker}.missing", "--plot", "out.png"): "argument --from-json: no such file",
    ("nope",): "invalid choice: 'nope'",
}
# the same refusals in process (fast: the modules are imported once); the model loader is a sentinel
BAD_IN_PROCESS = {
    ("gpu-check", "--device", "cpu"): "pass --allow-cpu",
    ("gpu-check", "--device", "cpu", "--allow-cpu", "--threads", "-1"): "argument --threads: must be a whole number",
    ("gpu-check", "--device", "cpu", "--allow-cpu", "--json", "{blocker}/out.json"): "argument --json: cannot write",
    ("fetch-model", "--cache", "{blocker}"): "argument --cache: '{blocker}' exists and is not a directory",
    ("train", "distill", "--layers", "0,x"): "argument --layers: must be comma-separated whole numbers",
    ("train", "distill", "--name", "a/b"): "argument --name: must be a bare file name",
    ("train", "distill", "--out", "{blocker}/weights"): "argument --out: cannot write",
    ("train", "distill", "--bogus"): "unrecognized arguments: --bogus",
    ("train", "medusa", "--heads", "0"): "argument --heads: must be a whole number >= 1",
    ("train", "medusa", "--bogus"): "unrecognized arguments: --bogus",
    ("train", "eagle", "--epochs", "nan"): "argument --epochs: must be a finite number > 0",
    ("train", "eagle", "--lr=-1e-3"): "argument --lr: must be a finite number > 0",
    ("train", "eagle", "--out", "{blocker}/eagle"): "argument --out: cannot write",
    ("train", "features", "--out", "x.jsonl", "--train-prompts", "0"): "argument --train-prompts",
    ("train", "features", "--out", "x.jsonl", "--train-prompts", "2", "--bogus"): "unrecognized arguments",
    ("train", "nope"): "invalid choice: 'nope'",
    ("bench", "--plot", "{blocker}/speedup.png"): "argument --plot: cannot write",
    ("bench", "--plot", "speedup.txt"): "argument --plot: must end in .png",
    ("bench", "--from-json", "{blocker}", "--plot", "out.png"): "--from-json '{blocker}' is not a readable JSON",
}
NO_CUDA = not torch.cuda.is_available()
if NO_CUDA:
    BAD[("gpu-check",)] = "argument --device: 'cuda' is not available: no CUDA device"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case above, run as its own process; {argv: CompletedProcess}."""
    tmp = tmp_path_factory.mktemp("cli")
    blocker = tmp / "blocker"
    blocker.write_text("a plain file: nothing can be created below it\n")
    env = {**os.environ, "SPECBOOK_CACHE": str(blocker / "cache"), "SPECBOOK_PROGRESS": "0"}
    cases = [a + ("--help",) for a in HELP] + UNKNOWN + list(BAD) + [BATCH_CASE]

    def run(argv):
        concrete = [s.replace("{blocker}", str(blocker)) for s in argv]
        return argv, subprocess.run([sys.executable, "-m", "specbook", *concrete], cwd=tmp, env=env,
                                    capture_output=True, text=True, timeout=TIMEOUT_S)

    # cwd is a scratch folder, so put this checkout first on the path the child imports from
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = dict(pool.map(run, cases))
    done["blocker"] = blocker
    return done


BATCH_CASE = ("batch", "--batch-sizes", "0")


def _no_work_done(proc):
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]  # the model cache sentinel was never touched


@pytest.mark.parametrize("argv", list(HELP), ids=lambda a: " ".join(a) or "specbook")
def test_every_command_has_a_working_help(runs, argv):
    proc = runs[argv + ("--help",)]
    assert proc.returncode == 0, proc.stderr[-3000:]
    _no_work_done(proc)
    for word in HELP[argv]:
        assert word in proc.stdout, (word, proc.stdout)


@pytest.mark.parametrize("argv", UNKNOWN, ids=" ".join)
def test_unknown_flags_are_refused(runs, argv):
    proc = runs[argv]
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "usage:" in proc.stderr and f"unrecognized arguments: {argv[-1]}" in proc.stderr, proc.stderr
    _no_work_done(proc)
    assert "==" not in proc.stdout  # e.g. the tour did not run with its slow defaults


@pytest.mark.parametrize("argv", list(BAD), ids=" ".join)
def test_bad_values_are_refused_before_anything_loads(runs, argv):
    proc = runs[argv]
    words = BAD[argv].replace("{blocker}", str(runs["blocker"]))
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert words in proc.stderr, proc.stderr
    _no_work_done(proc)
    assert proc.stdout == ""


@pytest.mark.parametrize("argv", list(BAD_IN_PROCESS), ids=" ".join)
def test_bad_values_are_refused_in_process(argv, tmp_path, monkeypatch, capsys):
    from specbook.models import smollm2

    def sentinel(*args, **kwargs):
        raise AssertionError("the model was loaded or fetched for a bad argument")

    monkeypatch.setattr(smollm2, "load_smollm2", sentinel)
    monkeypatch.setattr(smollm2, "fetch", sentinel)
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    concrete = [a.replace("{blocker}", str(blocker)) for a in argv]
    try:
        status = cli.main(concrete)
    except SystemExit as stop:
        status = stop.code
    assert status == 2
    assert BAD_IN_PROCESS[argv].replace("{blocker}", str(blocker)) in capsys.readouterr().err


def test_batch_dispatches_or_says_it_is_missing(runs):
    proc = runs[BATCH_CASE]
    _no_work_done(proc)
    assert proc.returncode == 2
    if HAS_BATCH:  # dispatched: its own parser refuses the bad flag before loading anything
        assert "--batch-sizes" in proc.stderr, proc.stderr
    else:
        assert "no module specbook.bench.batch" in proc.stderr, proc.stderr


# ----------------------------------------------------------------- in process: the pieces

def test_no_command_prints_the_list_and_fails(capsys):
    assert cli.main([]) == 2
    assert "fetch-model" in capsys.readouterr().err
    assert cli.main(["train"]) == 2
    assert "features" in capsys.readouterr().err


def test_a_missing_module_is_reported_not_raised(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "batch", ("specbook.bench.no_such_module", "x"))
    assert cli.main(["batch", "--anything"]) == 2
    assert "no module specbook.bench.no_such_module" in capsys.readouterr().err


def test_arguments_reach_the_command_unchanged(monkeypatch):
    seen = []
    fake = type(sys)("specbook_fake_cmd")
    fake.main = lambda argv: seen.append(argv) or 7
    monkeypatch.setitem(sys.modules, "specbook_fake_cmd", fake)
    monkeypatch.setattr(cli, "_module_exists", lambda name: True)
    monkeypatch.setitem(cli.TRAINERS, "fake", ("specbook_fake_cmd", "x"))
    assert cli.main(["train", "fake", "--x", "1", "--help"]) == 7
    assert seen == [["--x", "1", "--help"]]


@pytest.mark.parametrize("fn, good, bad", [
    (cliargs.positive_int, {"3": 3}, ["0", "-2", "1.5", "x", ""]),
    (cliargs.nonnegative_int, {"0": 0, "12": 12}, ["-1", "nan"]),
    (cliargs.positive_float, {"2e-3": 2e-3}, ["0", "-1", "nan", "inf", "x"]),
    (cliargs.nonnegative_float, {"0": 0.0}, ["-0.5", "nan", "inf"]),
    (cliargs.threads, {"1": 1, "16": 16}, ["0", "-1", "two"]),
    (cliargs.int_list, {"0,10,20": (0, 10, 20), "5": (5,)}, ["", "1,,2", "1,-2", "a"]),
    (cliargs.device, {"cpu": "cpu"}, ["gpu", "tpu", "cuda:x", ""] + (["cuda", "cuda:0"] if NO_CUDA else [])),
    (cliargs.file_name, {"draft": "draft"}, ["", "a/b", ".."]),
])
def test_argument_types(fn, good, bad):
    for text, value in good.items():
        assert fn(text) == value
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            fn(text)
        assert repr(text) in str(refused.value)  # the message quotes what was given


def test_path_types(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cliargs.writable_dir(str(tmp_path / "new" / "dir")) == str(tmp_path / "new" / "dir")
    assert not (tmp_path / "new").exists()  # checking makes nothing
    assert cliargs.writable_file(str(tmp_path / "a.json")) == str(tmp_path / "a.json")
    assert cliargs.existing_file(str(blocker)) == str(blocker)
    for fn, text in ((cliargs.writable_dir, blocker), (cliargs.writable_dir, blocker / "sub"),
                     (cliargs.writable_file, blocker / "a.json"), (cliargs.writable_file, tmp_path),
                     (cliargs.existing_file, tmp_path / "missing")):
        with pytest.raises(argparse.ArgumentTypeError):
            fn(str(text))


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_shows_on_a_terminal_only_and_can_be_turned_off(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert progress_enabled(stream=_Stream(True))
    assert not progress_enabled(stream=_Stream(False))  # a pipe, a log file, a test run
    assert not progress_enabled(disable=True, stream=_Stream(True))  # --no-progress
    for off in ("0", "false", "off", "no"):
        monkeypatch.setenv(ENV, off)
        assert not progress_enabled(stream=_Stream(True))
    monkeypatch.setenv(ENV, "1")
    assert progress_enabled(stream=_Stream(True))
