"""Where the local backend's model runs and in which dtype: ``trainer.device`` and ``trainer.dtype`` resolved once,
here, for the trainer and its sampler alike.

- ``device``: ``auto`` (the first CUDA device when torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.
  A CUDA device torch cannot see is refused with one line naming the field, before anything loads.
- ``dtype``: the *compute* dtype of every forward pass. ``auto`` is bfloat16 on a CUDA device that does bfloat16
  natively (Ampere and later) and float32 elsewhere: on the CPU and on older GPUs bfloat16 is emulated or slow,
  and float16 needs loss scaling (a deliberate choice, not a default).

The names and the syntax check need no torch (``hermes_nb.config`` imports them); torch is imported only to
resolve, so a kernel that starts a run on the CPU never loads it.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch

DTypeName = Literal["auto", "float32", "bfloat16", "float16"]
DTYPE_NAMES: tuple[str, ...] = get_args(DTypeName)
DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_DEVICE_SYNTAX = re.compile(r"auto|cpu|cuda(:\d+)?")


def device_syntax_problem(value: str) -> str | None:
    """Why ``value`` is not a ``trainer.device`` setting, or None when it is one (whether it exists is for
    ``resolve_device`` to say: the config may be written on another machine than the one that trains)."""
    if _DEVICE_SYNTAX.fullmatch(value):
        return None
    return f"expected {DEVICE_CHOICES}"


def _torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


@dataclass(frozen=True)
class Hardware:
    """A resolved ``(device, dtype)``: where the model lives and the dtype its forward passes compute in."""

    device: torch.device
    dtype: torch.dtype

    @property
    def reduced_precision(self) -> bool:
        import torch

        return self.dtype != torch.float32

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        """Forward passes of float32 weights computed in ``dtype`` (matrix products and attention; norms and
        softmax stay float32, as torch's autocast lists have them). No-op in float32."""
        import torch

        if not self.reduced_precision:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def describe(self) -> str:
        return f"{self.device} {str(self.dtype).removeprefix('torch.')}"


def _cuda_problem(setting: str) -> str | None:
    import torch

    if not torch.cuda.is_available():
        return f"{setting!r} asked for, but this torch ({torch.__version__}) sees no CUDA device"
    index = int(setting.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        return f"{setting!r} asked for, but torch sees {count} CUDA device(s) (cuda:0 to cuda:{count - 1})"
    return None


def check_device(setting: str, field: str = "trainer.device") -> None:
    """Refuse ``setting`` (a ``ConfigError`` naming ``field``) unless it is valid and present here. Imports torch
    only for a CUDA setting: ``auto`` and ``cpu`` are always usable."""
    from hermes_nb.errors import ConfigError

    problem = device_syntax_problem(setting)
    if problem is not None:
        raise ConfigError(f"{field}: {problem}, got {setting!r}")
    missing = _cuda_problem(setting) if setting.startswith("cuda") else None
    if missing is not None:
        raise ConfigError(f"{field}: {missing}; use auto or cpu on this machine")


def resolve_device(setting: str = "auto", field: str = "trainer.device") -> torch.device:
    import torch

    check_device(setting, field)
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def resolve_dtype(setting: str, device: torch.device, field: str = "trainer.dtype") -> torch.dtype:
    import torch

    from hermes_nb.errors import ConfigError

    if setting == "auto":
        native_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
        return torch.bfloat16 if native_bf16 else torch.float32
    if setting not in DTYPE_NAMES:
        raise ConfigError(f"{field}: expected one of {', '.join(DTYPE_NAMES)}, got {setting!r}")
    return _torch_dtype(setting)


def resolve_hardware(device: str = "auto", dtype: str = "auto") -> Hardware:
    """``trainer.device`` and ``trainer.dtype`` as torch objects (the one place ``auto`` is decided)."""
    resolved = resolve_device(device)
    return Hardware(device=resolved, dtype=resolve_dtype(dtype, resolved))
