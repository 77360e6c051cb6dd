"""Data-parallel training and checkpoints (specbook/train/distributed.py), on tiny random Llamas.

* Two CPU processes under torchrun (gloo) train Medusa heads and an EAGLE head to the loss curve
  and the weights of one process with the same global batch, within float32 rounding: measured
  at most about 1e-7 relative on the losses and 3e-7 on the weights; asserted at 1e-5. The
  global batches split unevenly (33 positions into 16 and 17; a last EAGLE batch of one
  sequence leaves one rank empty), which a plain average of the ranks' means would get wrong.
  A negative control (one process with the per-rank batch) lies far outside the tolerance.
* A run stopped after k steps and resumed from its checkpoint ends with the uninterrupted run's
  loss curve, validation record and weights, bit for bit; a checkpoint written by two processes
  resumes on one, within the same tolerance; a checkpoint of another run is refused.
* The command line refuses --resume without --checkpoint, and leaves the checkpoint flags out of
  the command it records.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from distributed_run import CHECKPOINT_EVERY, MEDUSA, run, tiny_setup
from specbook.train.distributed import Checkpoints, World
from specbook.train.medusa import train_medusa

HERE = Path(__file__).resolve().parent
RTOL, ATOL = 1e-5, 1e-6  # two processes against one: float32 rounding of sums in another order


@pytest.fixture(scope="module")
def one_process():
    return run(World())


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """Both heads trained by two gloo processes under torchrun; rank 0's result and checkpoints."""
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "distributed_run.py"), str(out)]
    done = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = torch.load(out / "result.pt", weights_only=True)
    assert result["world_size"] == 2
    return result, out


def assert_same_run(a: dict, b: dict, rtol: float = RTOL, atol: float = ATOL) -> None:
    for name in ("medusa", "eagle"):
        assert len(a[name]["loss"]) == len(b[name]["loss"]) > 1, name
        torch.testing.assert_close(torch.tensor(a[name]["loss"]), torch.tensor(b[name]["loss"]), rtol=rtol, atol=atol)
        assert a[name]["state"].keys() == b[name]["state"].keys()
        for key, value in a[name]["state"].items():
            torch.testing.assert_close(value, b[name]["state"][key], rtol=rtol, atol=atol, msg=f"{name} {key}")
    assert a["eagle"]["log"]["validation"] == b["eagle"]["log"]["validation"]


def test_two_processes_match_one_process_with_the_same_global_batch(one_process, two_processes):
    result, _ = two_processes
    assert_same_run(one_process, result)


def test_the_tolerance_can_fail_a_different_batch(one_process):
    """Negative control: one process with the per-rank batch (half the global one) is a different run."""
    model, fs, fit, _, vocab = tiny_setup()
    half = {**MEDUSA, "batch_size": MEDUSA["batch_size"] // 2}
    full = one_process["medusa"]["loss"]
    _, log = train_medusa(fs, model, fit, vocab=vocab, progress=False, **half)
    other = torch.tensor([loss for _, loss in log["loss"]][: len(full)])
    assert not torch.allclose(other, torch.tensor(full), rtol=100 * RTOL, atol=100 * ATOL)


def test_resumed_run_equals_the_uninterrupted_run_bit_for_bit(one_process, tmp_path):
    stop = CHECKPOINT_EVERY + 2  # stopped between two periodic checkpoints: the stop itself saves
    cut = run(World(), tmp_path, max_steps=stop)
    assert cut["medusa"]["log"]["stopped_early_at_step"] == stop == cut["eagle"]["log"]["stopped_early_at_step"]
    state = torch.load(tmp_path / "eagle.pt", weights_only=True)
    assert state["step"] == stop and {"model", "optimizer", "scheduler", "rng", "loop"} <= state.keys()
    resumed = run(World(), tmp_path, resume=True)
    for name in ("medusa", "eagle"):
        assert resumed[name]["loss"] == one_process[name]["loss"], name
        assert "stopped_early_at_step" not in resumed[name]["log"]
        for key, value in one_process[name]["state"].items():
            assert torch.equal(resumed[name]["state"][key], value), (name, key)
    assert resumed["eagle"]["log"]["validation"] == one_process["eagle"]["log"]["validation"]


def test_a_two_process_checkpoint_resumes_on_one_process(one_process, two_processes, tmp_path):
    _, out = two_processes
    for name in ("medusa", "eagle"):
        (tmp_path / f"{name}.pt").write_bytes((out / f"{name}.pt").read_bytes())
        assert torch.load(tmp_path / f"{name}.pt", weights_only=True)["step"] % CHECKPOINT_EVERY == 0
    assert_same_run(one_process, run(World(), tmp_path, resume=True))


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    model, fs, fit, _, vocab = tiny_setup()
    path = tmp_path / "m.pt"
    train_medusa(fs, model, fit, vocab=vocab, progress=False, max_steps=2,
                 checkpoints=Checkpoints(path), **MEDUSA)
    assert path.is_file()
    other = {**MEDUSA, "lr": MEDUSA["lr"] / 2}
    with pytest.raises(ValueError, match="different run.*lr"):
        train_medusa(fs, model, fit, vocab=vocab, progress=False, checkpoints=Checkpoints(path, resume=True), **other)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train_medusa(fs, model, fit, vocab=vocab, progress=False,
                     checkpoints=Checkpoints(tmp_path / "none.pt", resume=True), **MEDUSA)


def test_shards_cover_the_global_batch_in_order():
    for size in range(1, 6):
        for n in range(0, 12):
            parts = [World(rank=r, world_size=size).shard(list(range(n))) for r in range(size)]
            assert sum(parts, []) == list(range(n)) and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_command_line_checkpoint_flags(capsys):
    from specbook.train import recorded_command
    from specbook.train.eagle import main

    with pytest.raises(SystemExit) as exit_:  # refused while parsing, before any model is read
        main(["--resume"])
    assert exit_.value.code == 2 and "need --checkpoint" in capsys.readouterr().err
    argv = ["--epochs", "2", "--checkpoint", "/tmp/x.pt", "--checkpoint-every", "5", "--resume", "--out=o"]
    assert recorded_command("specbook.train.eagle", argv) == "python -m specbook.train.eagle --epochs 2"
