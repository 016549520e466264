"""A deterministic, resumable training loop (AdamW, warmup + cosine, EMA, NaN-step skipping, DDP).

Determinism and exact resume come from one rule: everything random in a step (the batch, the
timesteps, the noise) is drawn by `batch_fn(step, rank, world_size)`, from a generator seeded by
`(seed, step, rank)`. No iterator state has to be saved, and a run on `world_size` processes equals
one process given the concatenation of the per-rank batches. A `loss_fn` that draws from torch's
global generator instead (the transmitter's encoder shuffles its points with it) is covered too: the
checkpoint carries that generator's state (`rng`), and `resume` restores it (under DDP, rank 0's
on every rank: all ranks seed it alike and draw from it alike).

Runs repeat bit for bit with the same torch build, thread count and CPU vector instruction set;
a different instruction set (torch's `cpu_capability`, e.g. AVX2 against AVX-512) rounds some float
operations differently, and over thousands of steps the weights drift apart. `fit` therefore logs
these facts (`environment`) as the first record of every run and resume.

`TrainConfig.forward_threads` runs the forward pass (`loss_fn`) with more torch threads than the
backward pass and the optimiser step. Forward operators split their output between threads, so
they need not round differently; the backward's weight gradients and sums split their reductions,
so they do. For the transmitter recipe on the AVX-512 Xeon a two-thread forward gave the one-thread
run's weights bit for bit (`recipes/README.md`); check a new model or machine the same
way (two short runs, `sha256sum` of the weights) before relying on it.
"""
import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
from tqdm.auto import tqdm

from shap_e.train.ema import EMA
from shap_e.util.atomic import write_atomic_with
from shap_e.util.distributed import distributed_info
from shap_e.util.machine import cpu_model_and_flags

LossFn = Callable[[nn.Module, Any], Dict[str, torch.Tensor]]
BatchFn = Callable[[int, int, int], Any]


@dataclass
class TrainConfig:
    """Optimisation settings; every field can be set from a YAML training config."""

    steps: int = 1000
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: Tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    ema_decay: float = 0.999
    grad_clip: Optional[float] = 1.0
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 500
    out_dir: str = "runs/default"
    progress: bool = True
    forward_threads: Optional[int] = None  # torch threads of the forward pass; None: the process's count
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"steps={self.steps} must be at least 1")
        if self.lr <= 0:
            raise ValueError(f"lr={self.lr} must be positive")
        if self.checkpoint_every < 1 or self.log_every < 1:
            raise ValueError("checkpoint_every and log_every must be at least 1")
        if self.forward_threads is not None and self.forward_threads < 1:
            raise ValueError(f"forward_threads={self.forward_threads} must be at least 1 (or left out)")


def learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warmup to `lr`, then cosine decay to `min_lr_ratio * lr` at `steps`."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)


def check_stop_at(stop_at: Optional[int]) -> None:
    """Refuse a `stop_at` (`Trainer.fit`) below 1; runners call it before they prepare or write anything."""
    if stop_at is not None and stop_at < 1:
        raise ValueError(f"stop_at={stop_at} must be at least 1 (or left out)")


@contextlib.contextmanager
def torch_threads(n: Optional[int]) -> Iterator[None]:
    """Run the block with `n` torch threads (None: leave the count alone), then restore the count."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def step_generator(seed: int, step: int, rank: int) -> torch.Generator:
    """The generator a `batch_fn` should draw step `step` of process `rank` from."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 1_009 + rank)


def global_rng_state() -> Dict[str, Any]:
    """The state of torch's global generators: the CPU one, and each CUDA device's when there are any."""
    state: Dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_global_rng_state(state: Dict[str, Any]) -> None:
    """Restore what `global_rng_state` returned (CUDA states only where CUDA is available)."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def environment() -> Dict[str, Any]:
    """What a run's exact floats depend on besides its config and data: the torch build, the CPU
    vector instruction set torch dispatches to, the thread count, the CPU model and the process count.
    `fit` adds the config's `forward_threads`."""
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "cpu": cpu_model_and_flags()[0],
        "world_size": distributed_info()[1],
    }


def atomic_save(obj: Any, path: Path) -> None:
    """`torch.save(obj, path)`, atomically."""
    write_atomic_with(path, lambda tmp: torch.save(obj, tmp))


class Trainer:
    """Runs `config.steps` optimiser steps of `loss_fn(model, batch_fn(step, rank, world))["loss"]`."""

    def __init__(self, model: nn.Module, loss_fn: LossFn, batch_fn: BatchFn, config: TrainConfig):
        self.model, self.loss_fn, self.batch_fn, self.config = model, loss_fn, batch_fn, config
        self.rank, self.world_size = distributed_info()
        self.wrapped = model
        if self.world_size > 1:
            self.wrapped = nn.parallel.DistributedDataParallel(model)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=config.lr, betas=tuple(config.betas), weight_decay=config.weight_decay
        )
        self.ema = EMA(model, config.ema_decay) if config.ema_decay > 0 else None
        self.step = 0
        self.out_dir = Path(config.out_dir)
        self.checkpoint_path = self.out_dir / "checkpoint.pt"
        self.metrics_path = self.out_dir / "metrics.jsonl"

    @property
    def finished(self) -> bool:
        """Whether the run has taken all `config.steps` steps."""
        return self.step >= self.config.steps

    def state_dict(self) -> Dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "ema": None if self.ema is None else self.ema.state_dict(),
            "step": self.step,
            "config": asdict(self.config),
            "rng": global_rng_state(),
        }

    def save_checkpoint(self) -> None:
        if self.rank == 0:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            atomic_save(self.state_dict(), self.checkpoint_path)

    def resume(self, path: Optional[Path] = None) -> bool:
        """Load `path` (default: this run's checkpoint) if it exists; True when it did."""
        path = Path(path) if path is not None else self.checkpoint_path
        if not path.is_file():
            return False
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.ema is not None and state["ema"] is not None:
            self.ema.load_state_dict(state["ema"])
        self.step = int(state["step"])
        if "rng" in state:  # checkpoints of version 0.1.0 before the generator was saved have none
            set_global_rng_state(state["rng"])
        return True

    def log(self, record: Dict[str, Any]) -> None:
        if self.rank == 0:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")

    def _all_finite(self, loss: torch.Tensor) -> bool:
        finite = torch.isfinite(loss.detach()).all().float().reshape(1)
        if self.world_size > 1:
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)
        return bool(finite.item())

    def train_step(self) -> Dict[str, float]:
        """One optimiser step (or a logged skip when the loss is not finite on any process)."""
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config, self.step)
        batch = self.batch_fn(self.step, self.rank, self.world_size)
        self.model.train()
        with torch_threads(self.config.forward_threads):
            terms = self.loss_fn(self.wrapped, batch)
        loss = terms["loss"]
        self.optimizer.zero_grad(set_to_none=True)
        if not self._all_finite(loss):
            self.step += 1
            record = {"step": self.step, "skipped": "non-finite loss", "loss": float("nan")}
            self.log(record)
            return record
        loss.backward()
        record = {"step": self.step + 1, "lr": self.optimizer.param_groups[0]["lr"]}
        if self.config.grad_clip:
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
            record["grad_norm"] = float(norm)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.model)
        self.step += 1
        record.update({k: float(v.detach().mean()) for k, v in terms.items()})
        return record

    def fit(self, stop_at: Optional[int] = None) -> Dict[str, float]:
        """Train until `config.steps`; log every `log_every`, checkpoint every `checkpoint_every`.

        `stop_at` ends the call after that step instead, with a checkpoint there: the learning-rate
        schedule still runs to `config.steps`, so a `resume()` and `fit()` later continue the very run
        (e.g. with other `forward_threads` once the machine has cores to spare).
        Each logged step also records `seconds`: the wall time since this call began (a resumed run
        counts from its resume), so `metrics.jsonl` gives the run's speed on its machine.
        """
        check_stop_at(stop_at)
        end = self.config.steps if stop_at is None else min(stop_at, self.config.steps)
        bar = tqdm(
            total=self.config.steps, initial=self.step, disable=not self.config.progress or self.rank != 0,
            desc="train",
        )
        self.log({"step": self.step, "environment": dict(environment(), forward_threads=self.config.forward_threads)})
        record: Dict[str, float] = {}
        start = time.monotonic()
        while self.step < end:
            record = self.train_step()
            bar.update(1)
            if "loss" in record:
                bar.set_postfix(loss=f"{record['loss']:.4g}")
            if self.step % self.config.log_every == 0 and "skipped" not in record:
                self.log(dict(record, seconds=round(time.monotonic() - start, 2)))
            if self.step % self.config.checkpoint_every == 0 or self.step == end:
                self.save_checkpoint()
        bar.close()
        return record
