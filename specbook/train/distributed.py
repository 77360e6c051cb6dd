"""One trainer for one process or many: torchrun, DistributedDataParallel and checkpoints.

Shape legend: none (counts and scalars; a trainer's own tensors keep its legend).

The same command runs on one CPU, on several CPU processes, on one or several GPUs and on
several nodes; only the launcher changes:

    python -m specbook.train.medusa ...                                   # one process
    torchrun --standalone --nproc_per_node 2 -m specbook.train.medusa ...  # two processes on one machine
    torchrun --nnodes 2 --node_rank 0 --master_addr HOST --master_port 29500 \\
             --nproc_per_node 8 -m specbook.train.medusa ...               # node 0 of two, 8 GPUs each

torchrun starts one process per device and tells each its place in RANK, LOCAL_RANK and
WORLD_SIZE (as nanoGPT's train.py reads them). :func:`launched` starts the process group only
when WORLD_SIZE > 1, with NCCL on GPUs and gloo on CPUs, so a plain ``python -m`` run never
touches ``torch.distributed``. Why torchrun and DistributedDataParallel rather than a wrapper
such as accelerate: both ship with torch (no extra dependency) and the whole of it is the few
readable lines below.

Data parallelism that keeps one process's arithmetic. Every rank draws the same global batch
from the same seeded generator and keeps its own contiguous slice (:meth:`World.shard`, about
batch / world size rows). DDP averages the ranks' gradients; a rank's mean loss is scaled by
its share of the global count of loss terms (:meth:`World.share`, exactly 1 in one process),
so the average is the gradient of the global batch's mean even when the slices hold different
numbers of labelled positions. Results then match one process up to float rounding.

Checkpoints (:class:`Checkpoints`) hold the weights, the optimizer, the scheduler, the step,
the random states and the trainer's own loop state; rank 0 writes them with ``torch.save`` and
every rank reads them with ``torch.load(weights_only=True)``. They do not depend on the number
of processes: a run checkpointed on two processes can resume on one.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

FORMAT = 1  # version of the checkpoint layout


@dataclass(frozen=True)
class World:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        """Rank 0: the only process that prints and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def shard(self, items):
        """This rank's contiguous slice of a global batch (a tensor, list or range); the slices
        of all ranks, in rank order, are ``items`` again, and their sizes differ by at most one."""
        n = len(items)
        return items[n * self.rank // self.world_size : n * (self.rank + 1) // self.world_size]

    def share(self, count: torch.Tensor) -> torch.Tensor:
        """count * world_size / (count summed over ranks), float32: multiplied into a rank's mean
        over ``count`` terms, DDP's average of gradients becomes the mean over all ranks' terms.
        Ones in one process (an exact no-op)."""
        count = count.to(torch.float32)
        if not self.distributed:
            return torch.ones_like(count)
        total = count.clone()
        dist.all_reduce(total)
        return count * self.world_size / total.clamp(min=1)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The average over ranks (for the log: a rank's shared loss averages to the global loss)."""
        if not self.distributed:
            return values
        values = values.detach().clone()
        dist.all_reduce(values)
        return values / self.world_size

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any: a stop that one rank's clock decides
        must stop them all at the same step, or the others would wait forever in the next step."""
        if not self.distributed:
            return flag
        value = torch.tensor([int(flag)], device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The sum over ranks (counts of a sharded evaluation)."""
        if not self.distributed:
            return values
        values = values.clone()
        dist.all_reduce(values)
        return values

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` in DistributedDataParallel when there are several processes, else itself.
        device_ids stays None: inputs are already on the device, and DDP then passes them
        (an EAGLE head's cache among them) through untouched."""
        if not self.distributed:
            return module
        return torch.nn.parallel.DistributedDataParallel(module)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Run the block on rank 0 first (it may generate and cache data), then on the first
        process of every other node (which finds that cache on a shared file system, or writes its
        node's own), then on the rest: never two writers of one cache at once."""
        turn = 0 if self.main else 1 if self.local_rank == 0 else 2
        for stage in range(3):
            if stage == turn:
                yield
            self.barrier()


def pick_device(device: str | None, local_rank: int = 0) -> torch.device:
    """``device`` if given (a CUDA device becomes this process's GPU under torchrun), else
    the process's GPU where CUDA is available, else the CPU."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and "WORLD_SIZE" in os.environ:
        dev = torch.device("cuda", local_rank)
    return dev


@contextlib.contextmanager
def launched(device: str | None = None) -> Iterator[World]:
    """The :class:`World` of this process. Under torchrun with WORLD_SIZE > 1 the process group
    is started here (NCCL on GPUs, gloo on CPUs) and destroyed on exit; otherwise one process."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = pick_device(device, local)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if size == 1:
        yield World(device=dev)
        return
    # Rank 0 may generate the training data (minutes) while the others wait at a barrier.
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=timedelta(hours=2))
    try:
        yield World(int(os.environ["RANK"]), size, local, dev)
        # every rank done before any tears its connections down: a gloo rank that destroyed its group while
        # another was still saving was seen to abort ("terminate called without an active exception")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class Checkpoints:
    """Where and when a trainer saves its state, and whether it starts from it.

    path: the checkpoint file; every: save after every ``every`` steps (0: never on a count;
    a run stopped early by a time or step limit always saves); resume: continue from ``path``.
    """

    path: str | Path
    every: int = 0
    resume: bool = False

    def __post_init__(self):
        if not isinstance(self.every, int) or self.every < 0:
            raise ValueError(f"every must be an int >= 0, got {self.every!r}")

    def due(self, steps_done: int, stopping: bool = False) -> bool:
        return stopping or (self.every > 0 and steps_done % self.every == 0)

    def save(self, world: World, state: dict) -> None:
        """Write ``state`` (rank 0 only), through a temporary file so a crash never leaves half a file."""
        if not world.main:
            return
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({"format": FORMAT, **state}, tmp)
        os.replace(tmp, path)

    def load(self) -> dict:
        """The saved state, on the CPU (load_state_dict moves weights and optimizer state to the
        model's device; random states must stay on the CPU)."""
        if not Path(self.path).is_file():
            raise FileNotFoundError(f"no checkpoint to resume from at {self.path}")
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        if state.get("format") != FORMAT:
            raise ValueError(f"{self.path} is not a checkpoint of this version (format {state.get('format')!r})")
        return state


def rng_states(generator: torch.Generator) -> dict:
    """The trainer's generator and torch's global generators (CPU, and CUDA where present)."""
    out = {"generator": generator.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state()
    return out


def set_rng_states(states: dict, generator: torch.Generator) -> None:
    generator.set_state(states["generator"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])


def training_state(step: int, model: torch.nn.Module, optimizer, scheduler, generator: torch.Generator,
                   config: dict, **loop) -> dict:
    """A checkpoint's content after ``step`` optimizer steps; ``config`` names the run (a resumed
    run must have the same), ``loop`` is the trainer's own state (data order, log)."""
    return {"step": step, "config": config, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "rng": rng_states(generator), "loop": loop}


def restore(checkpoints: Checkpoints, model: torch.nn.Module, optimizer, scheduler,
            generator: torch.Generator, config: dict) -> tuple[int, dict]:
    """Load ``checkpoints.path`` into the model, optimizer, scheduler and random states; return
    (steps done, the trainer's loop state). A checkpoint of a different run is refused."""
    state = checkpoints.load()
    if state["config"] != config:
        diff = {k: (state["config"].get(k), v) for k, v in config.items() if state["config"].get(k) != v}
        raise ValueError(f"{checkpoints.path} was written by a different run (checkpoint, this run): {diff}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_states(state["rng"], generator)
    return state["step"], state["loop"]
