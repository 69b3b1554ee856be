"""What every figure module shares: matplotlib, imported only when a figure is drawn (never by `import helpers`)."""

from __future__ import annotations

from types import ModuleType


def pyplot() -> ModuleType:
    import matplotlib.pyplot as plt

    return plt
