"""Small helpers shared by the gitmem benchmarks: percentiles, timing, machine info."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100) of ``values``, nearest-rank with linear interpolation."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """p50/p95/max/mean of durations given in seconds, reported in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p95_ms": round(percentile(ms, 95), 3),
            "max_ms": round(max(ms), 3), "mean_ms": round(statistics.fmean(ms), 3)}


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``func`` once; return (seconds, result)."""
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def log(message: str) -> None:
    """Progress line on stderr (stdout is reserved for the JSON result)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git_version() -> str | None:
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.strip().removeprefix("git version ")


def machine_info(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """CPU, cores, RAM, OS, Python, dulwich and git versions (and the file system of ``path``)."""
    try:
        import dulwich
        dulwich_version = ".".join(map(str, dulwich.__version__))
    except ImportError:  # pragma: no cover
        dulwich_version = None
    info: dict[str, Any] = {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gb": _ram_gb(),
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "dulwich": dulwich_version, "git": _git_version(),
    }
    if path is not None:
        try:
            out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, check=True).stdout
            info["tmp_filesystem"] = out.splitlines()[1].split()[1]
        except (OSError, subprocess.CalledProcessError, IndexError):
            pass
    return info
