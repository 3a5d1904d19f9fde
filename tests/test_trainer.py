"""The one trainer and its one schedule: drafter training and target pre-training share them."""
import json
import math

import pytest
import torch

from dflash_lite import zoo
from dflash_lite.training.trainer import TrainConfig, Trainer, cosine_lr


def test_drafter_schedule_warms_up_on_a_fraction_then_decays_to_zero():
    config = TrainConfig(steps=100, lr=1.0)                       # the drafter defaults: 4% warm-up, floor 0
    assert math.isclose(cosine_lr(0 / 100, 0, config), 0.25)     # (0 + 1) / 100 of a 4% warm-up
    assert math.isclose(cosine_lr(3 / 100, 3, config), 1.0)      # the peak at the warm-up's end
    assert math.isclose(cosine_lr(51 / 100, 51, config), 0.5)    # half-way through the cosine: progress 0.52
    assert math.isclose(cosine_lr(99 / 100, 99, config), 0.0, abs_tol=1e-12)
    assert math.isclose(cosine_lr(0.52, 10, config), 0.5)        # a time budget ahead of the steps leads
    lrs = [cosine_lr(s / 100, s, config) for s in range(100)]
    assert lrs[3:] == sorted(lrs[3:], reverse=True)


def test_target_schedule_warms_up_on_steps_then_decays_to_a_tenth_of_the_peak():
    preset = zoo.TARGET_PRESETS["tiny"]
    config = zoo.train_config(preset, steps=4000)
    assert (config.warmup_steps, config.min_lr_ratio, config.betas) == (200, 0.1, (0.9, 0.95))
    peak = preset.lr
    assert math.isclose(cosine_lr(0 / 4000, 0, config), peak / 200)
    assert math.isclose(cosine_lr(199 / 4000, 199, config), peak)
    assert math.isclose(cosine_lr(1999 / 4000, 1999, config), 0.55 * peak)   # progress 0.5: the floor + half the rest
    assert math.isclose(cosine_lr(3999 / 4000, 3999, config), 0.1 * peak)
    assert min(cosine_lr(s / 4000, s, config) for s in range(200, 4000)) >= 0.1 * peak * (1 - 1e-12)
    assert math.isclose(cosine_lr(0.9, 10, config), peak * 11 / 200)   # warm-up counted in steps, even on a budget
    assert math.isclose(cosine_lr(1.0, 300, config), 0.1 * peak)        # the budget spent: the floor


def test_config_options_reach_the_optimizer_and_the_loss():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    dtypes = []

    def loss_fn(m, x):
        y = m[0](x)
        dtypes.append(y.dtype)
        return m[1](y).float().pow(2).mean(), {}                  # metrics without loss or accuracy

    config = TrainConfig(steps=2, lr=1e-2, weight_decay=0.1, decay_matrices_only=True, betas=(0.9, 0.95),
                         autocast_dtype=torch.bfloat16, log_every=1)
    trainer = Trainer(model, loss_fn, lambda: iter([torch.randn(2, 3)] * 10), config)
    groups = trainer.optimizer.param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert [[p.ndim for p in g["params"]] for g in groups] == [[2], [1, 1, 1]]
    assert all(g["betas"] == (0.9, 0.95) for g in groups)
    history = trainer.run()                                       # the progress bar needs no particular metric
    assert dtypes == [torch.bfloat16] * 2 and [h["step"] for h in history] == [1, 2]
    assert model[0].weight.dtype == torch.float32                 # fp32 master weights

    plain = Trainer(torch.nn.Linear(3, 4), loss_fn, lambda: iter([torch.randn(2, 3)] * 10), TrainConfig(steps=1))
    assert len(plain.optimizer.param_groups) == 1 and plain.optimizer.param_groups[0]["betas"] == (0.9, 0.999)


@pytest.mark.parametrize("bad", [{"warmup_fraction": 1.0}, {"min_lr_ratio": 1.5}, {"warmup_steps": -1},
                                 {"steps": 0}, {"log_every": 0}, {"checkpoint_every": -1},
                                 {"lr": 0.0}, {"grad_clip": -1.0}, {"weight_decay": float("nan")},
                                 {"time_budget_s": 0}, {"steps": 2.5}])
def test_a_schedule_that_cannot_run_is_refused(bad):
    """One line naming the field, at construction: ``log_every=0`` used to train a step and then
    divide by zero."""
    with pytest.raises(ValueError, match=next(iter(bad))) as info:
        TrainConfig(**bad)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_target_pretraining_runs_through_the_trainer(tmp_path, monkeypatch, capsys):
    """A few steps of the ``smoke`` preset (tokenizer and streams on the real corpus: seconds)."""
    made = []

    class Recorded(Trainer):
        def __post_init__(self):
            made.append(self)
            super().__post_init__()

    monkeypatch.setattr(zoo, "Trainer", Recorded)
    out = zoo.train_target(out=tmp_path / "target", preset_name="smoke", steps=3, log_every=1)
    assert len(made) == 1 and made[0].step == 3
    log = json.loads((out / "training_log.json").read_text())
    assert log["steps_done"] == 3 and log["bf16_autocast"] is True
    assert [sorted(entry) for entry in log["curve"]] == [["elapsed_s", "loss", "lr", "step"]] * 3
    assert [entry["step"] for entry in log["curve"]] == [0, 1, 2]
    peak = zoo.TARGET_PRESETS["smoke"].lr                         # 2 warm-up steps, then straight to the floor
    for entry, lr in zip(log["curve"], [peak / 2, peak, 0.1 * peak]):
        assert math.isclose(entry["lr"], lr)
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert printed == log["curve"]
    assert (out / "model.safetensors").is_file() and set(log["held_out_loss"]) == {"code", "math"}


# ----------------------------------------------------------------------------- checkpoints and resume
def test_a_planted_old_checkpoint_is_never_loaded_by_the_trainer(planted):
    run, marker = planted
    model = torch.nn.Linear(2, 2)
    trainer = Trainer(model, None, None, TrainConfig(), checkpoint_dir=run / "checkpoint")
    assert trainer.step == 0 and not marker.exists()


def test_trainer_checkpoint_round_trips_optimizer_and_rng(tmp_path):
    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        batches = lambda: iter([torch.randn(4, 3) for _ in range(100)])
        loss = lambda m, x: (m(x).pow(2).mean(), {"loss": 0.0, "accuracy_per_position": [0.0]})
        return Trainer(model, loss, batches, TrainConfig(steps=3, log_every=1),
                                    checkpoint_dir=tmp_path, run_config={"layers": 1, "block_size": 4})
    first = make()
    first.run()
    rng = torch.get_rng_state()
    torch.manual_seed(123)
    second = make()
    assert second.step == 3 and second.history == first.history and torch.equal(torch.get_rng_state(), rng)
    a, b = first.optimizer.state_dict(), second.optimizer.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for index, state in a["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["state"][index][key])
    with pytest.raises(ValueError, match="block_size=4, but this run has block_size=8") as info:
        Trainer(torch.nn.Linear(3, 2), None, None, TrainConfig(), checkpoint_dir=tmp_path,
                             run_config={"layers": 1, "block_size": 8})
    assert "\n" not in str(info.value)


def test_a_trainer_without_batches_fails_instead_of_hanging():
    trainer = Trainer(torch.nn.Linear(2, 2), None, lambda: iter([]), TrainConfig(steps=5))
    with pytest.raises(ValueError, match="no batch"):
        trainer.run()
