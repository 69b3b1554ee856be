"""Torch function modes chapter 04's module checks run student code under: a meta device as strict
as CUDA about mixing devices (`StrictLikeCuda`), and random initialisation skipped where pretrained
weights will overwrite every parameter (`NoRandomInit`)."""

from __future__ import annotations

from typing import Any

import torch

from helpers.safety import Args, Function, Kwargs, Types


class StrictLikeCuda(torch.overrides.TorchFunctionMode):  # type: ignore[misc]
    """Makes the meta device as strict as CUDA about mixing devices.

    Meta kernels accept a CPU index: `embedding(torch.arange(T))` with a meta
    weight quietly returns a meta tensor, so on a CPU-only machine the classic
    bug (position ids built on the CPU) would go unseen. CUDA refuses such a
    mix, except for indexing with a CPU tensor, copies and 0-dim CPU scalars;
    this mode does the same, so the meta pass fails where a GPU would."""

    ALLOWED = frozenset({"__getitem__", "__setitem__", "to", "copy_", "type_as", "cpu", "cuda"})

    def __torch_function__(self, func: Function, types: Types, args: Args = (), kwargs: Kwargs = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name not in self.ALLOWED:
            devices = {
                t.device.type
                for t in torch.utils._pytree.tree_leaves((args, kwargs))
                if isinstance(t, torch.Tensor) and t.dim() > 0
            }
            if {"meta", "cpu"} <= devices:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two devices, meta and cpu (in {name}; on a GPU: cuda:0 and cpu)"
                )
        return func(*args, **kwargs)


class NoRandomInit(torch.overrides.TorchFunctionMode):  # type: ignore[misc]
    """While a module whose every parameter pretrained weights will overwrite is built, its random
    initialisation fills zeros instead (as transformers skips init before loading a checkpoint):
    MiniLM's 30522 × 384 normal draws were half the time of BertEmbeddings' check."""

    RANDOM = frozenset(
        {
            "normal_",
            "uniform_",
            "trunc_normal_",
            "kaiming_uniform_",
            "kaiming_normal_",
            "xavier_uniform_",
            "xavier_normal_",
        }
    )

    def __torch_function__(self, func: Function, types: Types, args: Args = (), kwargs: Kwargs = None) -> Any:
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")  # Tensor.normal_(...) or nn.init.normal_(tensor=...)
        if getattr(func, "__name__", "") in self.RANDOM and isinstance(target, torch.Tensor):
            with torch.no_grad():
                return target.zero_()
        return func(*args, **kwargs)
