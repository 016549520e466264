"""The training loop: learns, resumes exactly, skips non-finite steps, and DDP equals one big batch."""
import json
import math
import sys
import time
from pathlib import Path

import pytest
import torch

from shap_e.train.loop import TrainConfig, Trainer, environment, learning_rate, torch_threads

sys.path.insert(0, str(Path(__file__).parent))
from toy import combined_batch, toy_batch, toy_loss, toy_model  # noqa: E402


def config(tmp_path, **kw):
    base = dict(steps=20, lr=1e-2, ema_decay=0.9, out_dir=str(tmp_path), progress=False, log_every=5)
    base.update(kw)
    return TrainConfig(**base)


def test_loss_falls_on_a_tiny_task(tmp_path):
    trainer = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path, steps=60))
    first = trainer.train_step()["loss"]
    last = trainer.fit()["loss"]
    assert last < 0.5 * first


def test_resume_continues_exactly(tmp_path):
    straight = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path / "a", steps=10))
    straight.fit()
    first = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path / "b", steps=10, checkpoint_every=5))
    for _ in range(5):
        first.train_step()
    first.save_checkpoint()
    resumed = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path / "b", steps=10))
    assert resumed.resume()
    assert resumed.step == 5
    resumed.fit()
    for key, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key
    for key, value in straight.ema.state_dict().items():
        assert torch.equal(value, resumed.ema.state_dict()[key]), key


def test_stop_at_checkpoints_there_and_a_resume_ends_where_the_straight_run_does(tmp_path):
    straight = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path / "a", steps=10))
    straight.fit()
    first = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path / "b", steps=10))
    first.fit(stop_at=4)
    assert first.step == 4 and not first.finished
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["step"] == 4
    resumed = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path / "b", steps=10, forward_threads=2))
    assert resumed.resume() and resumed.step == 4
    resumed.fit()
    assert resumed.finished
    for key, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key
    for key, value in straight.ema.state_dict().items():
        assert torch.equal(value, resumed.ema.state_dict()[key]), key


def test_resume_restores_the_global_generator_a_loss_draws_from(tmp_path):
    def noisy_loss(model, batch):  # draws from torch's global generator, not from the batch's
        x, y = batch
        return toy_loss(model, (x + 0.1 * torch.randn(x.shape), y))

    straight = Trainer(toy_model(), noisy_loss, toy_batch, config(tmp_path / "a", steps=6))
    straight.fit()
    first = Trainer(toy_model(), noisy_loss, toy_batch, config(tmp_path / "b", steps=6))
    first.fit(stop_at=3)
    resumed = Trainer(toy_model(), noisy_loss, toy_batch, config(tmp_path / "b", steps=6))  # reseeds torch
    assert resumed.resume()
    resumed.fit()
    for key, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key


def test_stop_at_past_the_last_step_runs_to_the_end_and_below_one_is_refused(tmp_path):
    trainer = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path, steps=3))
    with pytest.raises(ValueError, match="stop_at=0 must be at least 1"):
        trainer.fit(stop_at=0)
    assert trainer.step == 0
    trainer.fit(stop_at=50)
    assert trainer.step == 3 and trainer.finished


def test_non_finite_loss_skips_the_step_and_logs_it(tmp_path):
    def nan_on_step_two(model, batch):
        loss = toy_loss(model, batch)["loss"]
        return {"loss": loss * float("nan") if trainer.step == 2 else loss}

    trainer = Trainer(toy_model(), nan_on_step_two, toy_batch, config(tmp_path, steps=4, log_every=1))
    trainer.fit()
    for p in trainer.model.parameters():
        assert torch.isfinite(p).all()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("skipped") for r in records].count("non-finite loss") == 1
    assert len([r for r in records if "environment" not in r]) == 4


def test_every_run_and_resume_logs_its_environment_first(tmp_path):
    first = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path, steps=3, log_every=1))
    first.fit()
    resumed = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path, steps=5, log_every=1))
    assert resumed.resume()
    resumed.fit()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 3, 4, 5]
    for record in (records[0], records[4]):
        assert record["environment"] == dict(environment(), forward_threads=None)
    facts = records[0]["environment"]
    assert facts["torch"] == torch.__version__ and facts["threads"] == torch.get_num_threads()
    assert facts["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and facts["world_size"] == 1
    assert isinstance(facts["cpu"], str) and facts["cpu"]


def test_logged_steps_record_the_wall_time_since_the_run_began(tmp_path):
    trainer = Trainer(toy_model(), toy_loss, toy_batch, config(tmp_path, steps=4, log_every=2))
    before = time.monotonic()
    trainer.fit()
    elapsed = time.monotonic() - before
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    seconds = [r["seconds"] for r in records if "environment" not in r]
    assert len(seconds) == 2 and 0 <= seconds[0] <= seconds[1] <= elapsed + 0.01
    assert "seconds" not in records[0]


def test_learning_rate_warms_up_then_decays_to_the_floor():
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1, progress=False)
    assert learning_rate(cfg, 0) == pytest.approx(0.1)
    assert learning_rate(cfg, 9) == pytest.approx(1.0)
    assert learning_rate(cfg, 100) == pytest.approx(0.1)
    lrs = [learning_rate(cfg, s) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_bad_config_values_are_rejected():
    with pytest.raises(ValueError, match="steps=0"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="lr=-1"):
        TrainConfig(lr=-1)
    with pytest.raises(ValueError, match="forward_threads=0 must be at least 1"):
        TrainConfig(forward_threads=0)


def test_forward_threads_run_the_forward_pass_alone_with_that_many_threads(tmp_path):
    seen = {"forward": [], "backward": []}

    def counting_loss(model, batch):
        seen["forward"].append(torch.get_num_threads())
        terms = toy_loss(model, batch)
        terms["loss"].register_hook(lambda grad: seen["backward"].append(torch.get_num_threads()))
        return terms

    before = torch.get_num_threads()
    trainer = Trainer(toy_model(), counting_loss, toy_batch, config(tmp_path, steps=3, forward_threads=before + 1))
    trainer.fit()
    assert seen == {"forward": [before + 1] * 3, "backward": [before] * 3}
    assert torch.get_num_threads() == before
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["environment"]["forward_threads"] == before + 1


def test_torch_threads_restore_the_count_even_when_the_block_fails():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with torch_threads(before + 1):
            assert torch.get_num_threads() == before + 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


@pytest.mark.slow
def test_two_process_gloo_ddp_equals_one_process_with_the_combined_batch(tmp_path, torchrun):
    torchrun(str(Path(__file__).parent / "ddp_worker.py"), str(tmp_path / "ddp"))
    ddp_state = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)

    single = Trainer(toy_model(), toy_loss, combined_batch(2), TrainConfig(
        steps=6, lr=1e-2, ema_decay=0.9, out_dir=str(tmp_path / "one"), progress=False, checkpoint_every=6
    ))
    single.fit()
    for key, value in single.model.state_dict().items():
        assert math.isclose(0, (value - ddp_state["model"][key]).abs().max().item(), abs_tol=1e-6), key
