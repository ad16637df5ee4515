"""Shared by benchmarks/threads.py, step.py and ocsvm.py: print a table and append it, with the
machine (CPU model, cores, torch, device) and the date and ``uptime`` load, to a results file."""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path

import torch


def machine(device: str = "cpu") -> str:
    cpu = "unknown CPU"
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    dev = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else "CPU"
    return (
        f"{cpu}, {os.cpu_count()} cores ({usable} usable), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, device: {dev}"
    )


def load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "uptime unavailable"


def record_table(title: str, lines: list[str], results: str, write: bool, device: str) -> str:
    """Print ``lines`` under ``title`` with the machine, date and load; append to ``results``."""
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    text = "\n".join(
        [f"\n## {title}, {stamp}", "", machine(device), "", f"load: {load()}", "", *lines]
    )
    print(text, flush=True)
    if write:
        path = Path(results)
        if not path.exists():
            path.write_text("# Benchmark results (appended by the scripts in benchmarks/)\n")
        with path.open("a") as f:
            f.write(text + "\n")
    return text
