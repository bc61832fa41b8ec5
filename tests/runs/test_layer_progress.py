"""A scan's bar moves layer by layer inside a forward (progress.layer_progress): one sample of 32K tokens
is one forward of minutes, and a bar that moves only when the forward ends sat at 0 (issue 70)."""

import pytest
import torch
from tiny import make_tiny_model

from entropy_lens.progress import layer_progress, progress_bar
from entropy_lens.runs.memory import attention_modules


class Counted:
    def __init__(self):
        self.updates = []

    def update(self, n):
        self.updates.append(n)


def test_each_layer_advances_the_bar_by_its_share_and_the_shares_add_up():
    model = make_tiny_model(n_layers=3)
    layers = attention_modules(model)
    assert len(layers) == 3
    bar = Counted()
    with layer_progress(bar, layers) as expect, torch.no_grad():
        expect(100)
        model(torch.randint(0, 50, (1, 8)))
        assert bar.updates == [33, 33, 34]  # after each layer, not only at the end
        expect(7)
        model(torch.randint(0, 50, (1, 8)))
    assert sum(bar.updates) == 107 and len(bar.updates) == 6
    model(torch.randint(0, 50, (1, 8)))  # the hooks are gone with the block
    assert len(bar.updates) == 6


def test_a_scan_of_one_sample_reports_as_its_layers_finish(capsys):
    """`scan` through the real loop: the plain-line bar (stderr is no terminal here) ends at the tokens."""
    from entropy_lens import ScanConfig, scan

    scan(ScanConfig(model="tiny-nope", length=64, samples=2, batch_size=1, data="austen:persuasion"))
    err = capsys.readouterr().err
    assert "128/128" in err.replace(" ", "") or "128/128tok" in err.replace(" ", ""), err[-500:]
    bar = progress_bar(total=10, enabled=False)  # disabled: the same interface, nothing shown
    with layer_progress(bar, attention_modules(make_tiny_model())) as expect:
        expect(10)


@pytest.mark.slow
def test_the_native_kernel_is_built_before_the_bar_starts(monkeypatch):
    """Issue 80 item 5: `make demo`'s first scan built the native kernel inside its first forward, the bar
    already running (128/32.8k [02:11<9:17:36, 1.03s/tok]). The build is a step of its own now, before the
    bar: an injected build (PROCESS_NATIVE's seam) is asked for first, then the bar made."""
    from entropy_lens import ScanConfig, scan
    from entropy_lens.kernels.native import PROCESS_NATIVE
    from entropy_lens.runs import scan as scan_module

    events = []
    real_bar = scan_module.progress_bar

    def build():
        events.append("build")
        raise RuntimeError("no compiler here (a test's build)")  # the torch path runs, as without a compiler

    def bar(**kw):
        events.append("bar")
        return real_bar(**kw)

    monkeypatch.setattr(PROCESS_NATIVE, "build", build)
    monkeypatch.setattr(PROCESS_NATIVE, "module", None)
    monkeypatch.setattr(PROCESS_NATIVE, "status", "not built")
    monkeypatch.setattr(scan_module, "progress_bar", bar)
    result = scan(
        ScanConfig(model="tiny-nope", length=64, samples=1, data="austen:persuasion"), progress=False
    )
    assert events == ["build", "bar"] and result.meta["native"].startswith("unavailable (RuntimeError")
    events.clear()
    PROCESS_NATIVE.status = "not built"  # (monkeypatch restores it)
    scan(ScanConfig(model="tiny-nope", length=64, samples=1, fused="off"), progress=False)
    assert events == ["bar"]  # the torch path's route alone: nothing to build
