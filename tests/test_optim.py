"""domainpar's AdamW is torch's, bit for bit and state for state, and never imports torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import torch

from domainpar.optim import AdamW


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 1))


def _train(optimizer_class, model, steps: int, closure: bool = False):
    optimizer = optimizer_class(model.parameters(), lr=3e-2, betas=(0.8, 0.95), eps=1e-7, weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-2, total_steps=steps + 1)
    generator = torch.Generator().manual_seed(7)
    for _ in range(steps):
        x = torch.randn(16, 5, generator=generator)

        def loss():
            optimizer.zero_grad()
            value = model(x).square().mean()
            value.backward()
            return value

        if closure:
            optimizer.step(loss)
        else:
            loss()
            optimizer.step()
        schedule.step()
    return optimizer


def test_steps_and_state_are_torchs_bit_for_bit():
    for closure in (False, True):
        ours, theirs = _model(0), _model(0)
        mine = _train(AdamW, ours, 6, closure)
        reference = _train(torch.optim.AdamW, theirs, 6, closure)
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b) and torch.equal(a.grad, b.grad)
        state, expected = mine.state_dict(), reference.state_dict()
        assert state["param_groups"] == expected["param_groups"]
        for key, value in expected["state"].items():
            assert value.keys() == state["state"][key].keys()
            assert all(torch.equal(value[name], state["state"][key][name]) for name in value)


def test_checkpoints_move_between_it_and_torchs():
    source, model = _model(0), _model(1)
    reference = _train(torch.optim.AdamW, source, 3)
    mine = AdamW(model.parameters(), lr=1.0)
    mine.load_state_dict(reference.state_dict())
    back = torch.optim.AdamW(_model(2).parameters(), lr=1.0)
    back.load_state_dict(mine.state_dict())
    assert back.state_dict()["param_groups"] == reference.state_dict()["param_groups"]
    assert all(torch.equal(back.state_dict()["state"][k]["exp_avg_sq"], v["exp_avg_sq"])
               for k, v in reference.state_dict()["state"].items())


def test_step_hooks_run_once_per_step():
    model = _model(0)
    optimizer = AdamW(model.parameters(), lr=1e-2)
    calls: list[str] = []
    optimizer.register_step_pre_hook(lambda *_: calls.append("pre"))
    optimizer.register_step_post_hook(lambda *_: calls.append("post"))
    model(torch.ones(2, 5)).sum().backward()
    optimizer.step()
    assert calls == ["pre", "post"]


def test_training_with_it_leaves_the_compiler_unimported():
    # torch.optim's own AdamW imports torch._dynamo (2-2.5 s of CPU) on construction and on every step.
    code = (
        "import sys, torch\n"
        "from domainpar.optim import AdamW\n"
        "m = torch.nn.Linear(3, 1)\n"
        "o = AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)\n"
        "s = torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1e-3, total_steps=4)\n"
        "m(torch.ones(2, 3)).sum().backward(); o.step(); s.step(); o.zero_grad()\n"
        "o.load_state_dict(o.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False", result.stdout
