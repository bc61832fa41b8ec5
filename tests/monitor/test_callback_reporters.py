"""EntropyLensCallback reaches the `report_to` reporters (issues 61, 66): transformers calls them before the
callbacks a user passes, so `callback.add_to(trainer)` puts the callback first; TensorBoard's callback then
writes the attention tags. Without add_to, with reporters configured, on_train_begin says so in one line."""

import warnings
from typing import ClassVar

import pytest
from tiny import make_tiny_model

from entropy_lens import EntropyLensCallback


def token_dataset(n=8, T=16):
    import torch

    out = []
    for i in range(n):
        ids = torch.randint(2, 300, (T,), generator=torch.Generator().manual_seed(100 + i))
        out.append({"input_ids": ids, "attention_mask": torch.ones(T, dtype=torch.long), "labels": ids})
    return out


class Writer:
    """A SummaryWriter that keeps what it is given (tensorboard is not a dependency of the tests)."""

    scalars: ClassVar[list[tuple[str, float, int]]] = []

    def __init__(self, log_dir=None):
        self.log_dir = log_dir

    def add_scalar(self, tag, value, step):
        Writer.scalars.append((tag, value, step))

    def add_text(self, *args, **kwargs):
        pass

    def flush(self):
        pass

    def close(self):
        pass


@pytest.mark.slow  # transformers' Trainer: seconds to import and set up on 2 cores
def test_a_callback_added_with_add_to_reaches_tensorboard(tmp_path, monkeypatch):
    """report_to="tensorboard" with transformers' own TensorBoardCallback (its writer replaced by one
    that records, where tensorboard itself is not installed), the callback passed in callbacks=[...] and
    put first by add_to: the attention scalars of every logged step are written as TensorBoard tags."""
    from transformers import Trainer, TrainingArguments
    from transformers.integrations import integration_utils
    from transformers.integrations.integration_utils import TensorBoardCallback

    class TensorBoard(TensorBoardCallback):
        def __init__(self, tb_writer=None):  # TensorBoardCallback's, without importing tensorboard
            self._SummaryWriter, self.tb_writer, self.logging_dir = Writer, tb_writer, None

    monkeypatch.setitem(integration_utils.INTEGRATION_TO_CALLBACK, "tensorboard", TensorBoard)
    monkeypatch.setattr(Writer, "scalars", [])
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-3,
        report_to="tensorboard",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    callback = EntropyLensCallback(stats=("entropy", "max_logit"))
    model = make_tiny_model(n_layers=2, n_heads=4, n_kv_heads=2).train()
    trainer = Trainer(model=model, args=args, train_dataset=token_dataset(), callbacks=[callback])
    handler = trainer.callback_handler.callbacks
    assert handler.index(callback) > next(i for i, c in enumerate(handler) if isinstance(c, TensorBoard))
    order = [c for c in handler if c is not callback]
    assert callback.add_to(trainer) is callback
    assert handler == [callback, *order]  # first now, the others in their order: the reporters see its logs
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # added first: no warning
        trainer.train()
    tags = {(tag, step) for tag, _, step in Writer.scalars}
    for step in (1, 2, 3):
        assert ("train/loss", step) in tags
        for stat in ("entropy", "max_logit"):
            for layer in (0, 1):
                assert (f"train/attention/{stat}/layer_{layer}/max", step) in tags
    logged = [e for e in trainer.state.log_history if "loss" in e]
    written = {(tag, step): value for tag, value, step in Writer.scalars}
    for entry in logged:  # what TensorBoard got is what the Trainer's own log holds
        key = "attention/entropy/layer_1/mean"
        assert written[(f"train/{key}", entry["step"])] == pytest.approx(entry[key])
    callback.close()


def test_without_add_to_it_warns_in_one_line_when_reporters_are_configured():
    """on_train_begin of a callback that add_to did not put first, with reporters configured: one line says
    to call add_to; none without reporters, and none once add_to has put it first."""
    from types import SimpleNamespace

    model = make_tiny_model(n_layers=1, n_heads=2, n_kv_heads=2)
    callback = EntropyLensCallback()
    with pytest.warns(UserWarning, match=r"call callback\.add_to\(trainer\)") as caught:
        callback.on_train_begin(SimpleNamespace(report_to=["tensorboard"]), None, None, model=model)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert "['tensorboard']" in str(caught[0].message)
    callback.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        callback.on_train_begin(SimpleNamespace(report_to=[]), None, None, model=model)
    callback.close()
    other = object()
    trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[other]))  # Trainer's list, alone
    callback.add_to(trainer)
    assert trainer.callback_handler.callbacks == [callback, other]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        callback.on_train_begin(SimpleNamespace(report_to=["tensorboard"]), None, None, model=model)
    callback.close()
