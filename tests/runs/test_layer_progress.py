"""A scan's bar moves layer by layer inside a forward (progress.layer_progress): one sample of 32K tokens
is one forward of minutes, and a bar that moves only when the forward ends sat at 0 (issue 70)."""

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
