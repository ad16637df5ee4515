"""Where and on what a run ran: ``RUN/provenance.json``, also kept in every checkpoint.

One call after setup (:func:`start`) and one at the end of the process (:func:`finish`). Each
process that trains the run (the first start and every resume after a preemption) adds one
*segment* (a process that trains nothing, such as the command of a finished run run again, adds
none): the code (git commit and whether the tree had uncommitted changes, or the installed
package's version outside a git checkout), host, CPU model and cores, GPU model and count, world
size, Python/torch/triton/CUDA versions, the plugins it trained with (each one's distribution
and version, or a file's sha256: :mod:`pretrain.runtime.plugin_provenance`), the config file
given to ``--cfg`` (resolved) and its sha256, its start (the
process's start, imports and data set-up included) and end in UTC, its wall time, and its peak
memory (the resident set of rank 0's training process, and the peak CUDA memory allocated by
torch on rank 0's GPU). The top level
sums them: total wall time (the segments' sum: time spent waiting in a queue between segments is
not counted), first start, last end, peak memory over segments, and whether every segment ran
the same commit on the same hardware.

A checkpoint holds the provenance as it was when it was written (its segment's ``end`` is empty
and its wall time and peaks are those so far). Only rank 0 writes; nothing here raises: a field
that cannot be read is ``null``, and a file that cannot be written prints one warning.

``python -m linear_eval table`` and ``scripts/gen_results.py`` read the file.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from pretrain.runtime import dist, run_folder

FILE = "provenance.json"
FORMAT = 1
#: the folders whose untracked files make the code "dirty" (the packages a run imports)
PACKAGES = ("pretrain", "negatives", "linear_eval", "slurm")


def utc(t: float) -> str:
    """Seconds since the epoch as an ISO 8601 UTC time to the second (``...Z``)."""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def process_start() -> float:
    """This process's start in seconds since the epoch (Linux ``/proc``), else now."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of proc(5): starttime, in clock ticks after boot
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_cores() -> int | None:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def package_root() -> Path:
    """The root of the tree this package was imported from (a checkout's, or site-packages)."""
    return Path(__file__).resolve().parents[2]


def code_version() -> dict[str, Any]:
    """The git commit of the source tree this package was imported from and whether it has
    uncommitted changes to tracked files or untracked files in its packages; the installed
    version where it is not a checkout. Both stay None (unknown) outside a repository, and
    where the repository's root is not the package's own (a copy vendored in another project)."""
    root = package_root()
    out: dict[str, Any] = {"commit": None, "dirty": None, "version": None}
    try:
        out["version"] = importlib.metadata.version("negmine")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        git = ["git", "-C", str(root)]

        def run(*args: str) -> str:
            return subprocess.run(
                [*git, *args], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()

        if Path(run("rev-parse", "--show-toplevel")).resolve() != root:
            return out  # a copy inside another project's repository: its HEAD is not ours
        commit = run("rev-parse", "HEAD")
        tracked = run("status", "--porcelain", "--untracked-files=no")
        untracked = run("status", "--porcelain", "--untracked-files=all", "--", *PACKAGES)
        out["commit"], out["dirty"] = commit, bool(tracked or untracked)
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def config_record(path: str | Path | None) -> dict[str, str | None]:
    """The config file the run was given (``--cfg``, resolved) and its sha256; both None when
    there is none (a config built in code), the digest None when the file cannot be read. A file
    of this package's tree (a shipped recipe) is recorded relative to it
    (``pretrain/configs/NAME.yaml``), so that a kept log names no path of the measuring machine."""
    if path is None:
        return {"config_file": None, "config_sha256": None}
    path = Path(path).resolve()
    try:
        digest: str | None = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        digest = None
    root = package_root()
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    return {"config_file": str(shown), "config_sha256": digest}


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpus(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda" or not torch.cuda.is_available():
        return {"gpu_model": None, "gpu_count": 0}
    return {"gpu_model": torch.cuda.get_device_name(device), "gpu_count": torch.cuda.device_count()}


def peak_rss_mib() -> float:
    """Peak resident set of this process in MiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


class Provenance:
    """The run's provenance: earlier segments (from ``RUN/provenance.json``) and this process's."""

    def __init__(
        self,
        run_dir: str | Path,
        device: torch.device,
        started: float,
        plugins: list[dict[str, Any]] | None = None,
        config_file: str | Path | None = None,
    ) -> None:
        self.path = Path(run_dir) / FILE
        self.device = device
        self.started = started
        self.earlier: list[dict[str, Any]] = []
        self.original: bytes | None = None  # the file as this process found it
        if self.path.exists():
            try:
                self.original = self.path.read_bytes()
                self.earlier = list(json.loads(self.original).get("segments", []))
            except (OSError, ValueError, AttributeError):
                self.earlier = []  # an unreadable file: start afresh rather than fail the run
        self.segment: dict[str, Any] = {
            **code_version(),
            "host": socket.gethostname(),
            "cpu_model": cpu_model(),
            "cpu_cores": cpu_cores(),
            **gpus(device),
            "device": str(device),
            "world_size": dist.world_size(),
            "python": platform.python_version(),
            "torch": str(torch.__version__),  # a str subclass that weights_only refuses
            "triton": package_version("triton"),
            "cuda": None if torch.version.cuda is None else str(torch.version.cuda),
            "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
            **config_record(config_file),
            "plugins": plugins or [],  # the strategy's and loss's, where not this package's
            "start": utc(started),
            "end": None,
            "wall_s": None,
            "peak_rss_mib": None,
            "peak_gpu_mib": None,
            "end_step": None,
        }

    def current(self, end: float | None = None, step: int | None = None) -> dict[str, Any]:
        """This segment as of now (``end`` given: as finished)."""
        seg = dict(self.segment)
        now = time.time() if end is None else end
        seg["wall_s"] = round(now - self.started, 1)
        seg["peak_rss_mib"] = peak_rss_mib()
        if self.device.type == "cuda" and torch.cuda.is_available():
            seg["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
        if end is not None:
            seg["end"] = utc(end)
        if step is not None:
            seg["end_step"] = step
        return seg

    def snapshot(self, end: float | None = None, step: int | None = None) -> dict[str, Any]:
        """Plain data (checkpoints load it with ``weights_only=True``)."""
        return summarize([*self.earlier, self.current(end, step)])

    def write(self, data: dict[str, Any]) -> None:
        if not dist.is_main():
            return
        try:
            run_folder.write_text(self.path, json.dumps(data, indent=1) + "\n", self.path.parent)
        except OSError as e:
            print(
                f"warning: could not write {self.path} ({e.strerror or e}); the run goes on "
                "without its provenance record",
                file=sys.stderr,
            )


def dirty(flags: list[bool | None]) -> bool | None:
    """True if any segment ran uncommitted code, False if every one is known clean, else None."""
    if any(flags):
        return True
    return None if None in flags else False


def summarize(segments: list[dict[str, Any]]) -> dict[str, Any]:
    """The top level of ``provenance.json`` over its segments."""

    def same(key: str) -> Any:
        values = {json.dumps(s.get(key)) for s in segments}
        return segments[-1].get(key) if len(values) == 1 else "mixed"

    peaks = {
        k: max((s[k] for s in segments if s.get(k) is not None), default=None)
        for k in ("peak_rss_mib", "peak_gpu_mib")
    }
    walls = [s.get("wall_s") or 0.0 for s in segments]
    return {
        "format": FORMAT,
        "commit": same("commit"),
        "dirty": dirty([s.get("dirty") for s in segments]),
        "host": same("host"),
        "cpu_model": same("cpu_model"),
        "cpu_cores": same("cpu_cores"),
        "gpu_model": same("gpu_model"),
        "gpu_count": same("gpu_count"),
        "world_size": same("world_size"),
        "torch": same("torch"),
        "plugins": same("plugins"),
        "config_sha256": same("config_sha256"),
        "start": segments[0].get("start"),
        "end": segments[-1].get("end"),
        "wall_s": round(sum(walls), 1),
        **peaks,
        "segments": segments,
    }


def start(
    run_dir: str | Path,
    device: torch.device,
    plugins: list[dict[str, Any]] | None = None,
    config_file: str | Path | None = None,
) -> Provenance:
    """Record this process's segment in ``RUN/provenance.json`` (rank 0): call once after setup.
    ``plugins``: :func:`pretrain.runtime.plugin_provenance.record` of the strategy and loss;
    ``config_file``: the file given to ``--cfg`` (None: the config was built in code)."""
    prov = Provenance(run_dir, device, process_start(), plugins, config_file)
    prov.write(prov.snapshot())
    return prov


def finish(prov: Provenance | None, step: int) -> None:
    """Close this process's segment (end time, wall time, peaks, last global step). A process
    that trained nothing (the command of a finished run, run again) leaves no segment: the file
    gets back the bytes it had."""
    if prov is None:
        return
    if prov.original is not None and prov.earlier and prov.earlier[-1].get("end_step") == step:
        if dist.is_main():
            try:
                original = prov.original
                run_folder.atomic_write(prov.path, lambda f: f.write(original), prov.path.parent)
            except OSError:
                pass  # the segment stays; harmless
        return
    prov.write(prov.snapshot(end=time.time(), step=step))


def read(run_dir: str | Path) -> dict[str, Any] | None:
    """``RUN/provenance.json``, or None when the run has none (made before it was recorded)."""
    path = Path(run_dir) / FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


#: the keys that readers of ``provenance.json`` use (``linear_eval table``, the results page),
#: the types each may hold besides null, and what the value should be
READ_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "wall_s": ((int, float), "a number of seconds"),
    "world_size": ((int,), "a whole number of ranks"),
    "cpu_cores": ((int,), "a whole number of cores"),
    "gpu_model": ((str,), "a name"),
    "cpu_model": ((str,), "a name"),
    "plugins": ((list,), "a list of plugin records"),
}


def damaged(prov: Any) -> str:
    """What makes a record read from ``provenance.json`` unusable to its readers: the key and its
    value ("" when nothing; None, a run made before provenance was recorded, is fine)."""
    if prov is None:
        return ""
    if not isinstance(prov, dict):
        return f"holds {json.dumps(prov)[:40]}, not an object of keys"
    for key, (types, what) in READ_KEYS.items():
        v = prov.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, types)):
            return f"key {key!r} is {json.dumps(v)[:40]}, not {what}"
        if key == "plugins" and v and not all(isinstance(r, dict) for r in v):
            return f"key {key!r} is {json.dumps(v)[:40]}, not {what}"
    return ""


def hardware(prov: dict[str, Any] | None) -> str:
    """One short cell: ``1x NVIDIA H100 80GB HBM3`` or ``AMD EPYC, 2 cores`` ("-" when unknown)."""
    if not prov:
        return "-"
    gpu = prov.get("gpu_model")
    world = prov.get("world_size") or 1
    if gpu and gpu != "mixed":
        return f"{world}x {gpu}"
    cpu, cores = prov.get("cpu_model"), prov.get("cpu_cores")
    if cpu == "mixed" or gpu == "mixed":
        return "mixed (see provenance.json)"
    text = f"{cpu or 'CPU'}" + (f", {cores} cores" if cores else "")
    return text + (f", {world} ranks" if world > 1 else "")


def duration(seconds: float | None) -> str:
    """``3 min 13 s``, ``2 h 05 min 07 s`` ("-" when unknown): exact to the second, as the
    seconds it is given (a wall time of 4,608 s is 1 h 16 min 48 s, not "1 h 16 min")."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min {s % 60:02d} s"
