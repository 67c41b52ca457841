"""What a benchmark's first line says about the machine it ran on: the CPU's model, its cores and the load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["cpu_model", "load_avg", "machine"]


def cpu_model() -> str:
    """The CPU's model name, as ``/proc/cpuinfo`` gives it ("unknown" where it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "unknown"


def load_avg() -> list[float]:
    """The load average over 1, 5 and 15 minutes (a shared machine's neighbours show here)."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """The CPU, its cores and the load, as a benchmark's first line says them."""
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "load": load_avg()}
