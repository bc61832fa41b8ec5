"""Figure 7's words about its early checkpoint: where it sits in the final model's training, counted from
the models' training.json (all steps, and the pretraining ones before the passkey phase), not typed."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from entropy_lens.figures.registry import item
from entropy_lens.training.training_record import passkey_phase_steps, training_steps


def test_figure7_says_where_its_early_checkpoint_sits_in_training():
    early, final = training_steps("tiny-nope-step300"), training_steps("tiny-nope")
    passkey = passkey_phase_steps("tiny-nope")
    assert passkey and early < final - passkey  # the snapshot is taken during pretraining
    sweep = SimpleNamespace(scales=np.array([1.0, 2.0]), length=1024)
    panel = {"fit": None, "fit_smoothed": None}
    data = SimpleNamespace(
        early=SimpleNamespace(model="tiny-nope-step300", steps=early, passkey_steps=0, **panel),
        final=SimpleNamespace(model="tiny-nope", steps=final, passkey_steps=passkey, sweep=sweep, **panel),
    )
    c = SimpleNamespace(sweep_scales="1:2:1", sweep_samples=4, fit_smooth=25)
    pretraining = final - passkey
    want = (
        f"the left panel is tiny-nope-step300, a checkpoint of tiny-nope's own training run at {early} of its "
        f"{final} steps ({early / final:.0%}; {early / pretraining:.0%} of its {pretraining} pretraining "
        "steps) (the paper: 10K of 50K steps, 20%)"
    )
    differences = item("figure-07").differences
    assert differences(data, c)[0] == want
    # the committed section was regenerated from these words (entropy-lens figures 7 --cached-only)
    readme = (Path(__file__).parents[2] / "figures" / "README.md").read_text(encoding="utf-8")
    assert f"- {want}\n" in readme
    # no early steps recorded: the checkpoint is named without a share
    data.early.steps = None
    assert differences(data, c)[0].startswith(
        "the left panel is tiny-nope-step300, a checkpoint of tiny-nope's own training run (the paper"
    )
