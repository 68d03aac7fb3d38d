"""The environment and the source, checked before training (``datakit doctor``): each finding with its fix.

What breaks data loading is usually the machine, not the code: a small ``/dev/shm`` in Docker
("Bus error", or a hang), a low open-file limit ("received 0 items of ancdata"), more workers
than the CPUs a container may use, CUDA started before workers fork, OpenCV's thread pool
inherited by forked workers, ``CUDA_VISIBLE_DEVICES`` set after CUDA started, a torchvision
built for another torch, a slow disk under millions of small files. Each check here is a
function that takes what it measures as arguments (tested without the machine it describes);
:func:`doctor` gathers them. :func:`~datakit.loader.create_loader` applies the safe fixes itself.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "DoctorReport",
    "Finding",
    "check_cpus",
    "check_cuda",
    "check_open_files",
    "check_opencv",
    "check_sharing_strategy",
    "check_shm",
    "check_versions",
    "doctor",
    "read_speed",
]

MIB = 2**20
STATUSES = ("ok", "info", "warn", "fail")
LOW_FILE_LIMIT = 4096  # below it, create_loader switches to the file_system sharing strategy


@dataclass
class Finding:
    """One check: ``status`` is ``ok``, ``info``, ``warn`` or ``fail``; ``fix`` says what to do."""

    check: str
    status: str
    detail: str
    fix: str = ""
    data: dict = field(default_factory=dict)


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No finding that will break training (``fail``)."""
        return all(f.status != "fail" for f in self.findings)

    def to_json(self) -> dict:
        return {"ok": self.ok, "findings": [asdict(f) for f in self.findings]}


# ---------------------------------------------------------------------------------------------
# the checks, each on the values it is given


def check_shm(batch_bytes: int, num_workers: int, prefetch_factor: int, shm_free: int | None,
              shm_total: int | None = None) -> Finding:  # fmt: skip
    """Whether ``/dev/shm`` holds the batches in flight: every worker keeps ``prefetch_factor``
    batches there, and the training loop holds two more (see :func:`~datakit.loader.plan_shared_memory`)."""
    from datakit.loader import plan_shared_memory

    if shm_free is None:
        return Finding("shm", "info", "no /dev/shm here; worker batches use the platform's shared memory")
    need = batch_bytes * (num_workers * prefetch_factor + 2) if num_workers else 0
    data = {"free": shm_free, "total": shm_total, "need": need, "batch_bytes": batch_bytes,
            "num_workers": num_workers, "prefetch_factor": prefetch_factor}  # fmt: skip
    what = (f"/dev/shm: {shm_free / MIB:.0f} MiB free; {num_workers} workers x prefetch_factor {prefetch_factor} "
            f"batches of {batch_bytes / MIB:.1f} MiB, and 2 more the training loop holds, need "
            f"{need / MIB:.0f} MiB")  # fmt: skip
    if need <= 0.9 * shm_free:  # as create_loader plans: a tenth left for labels and other users
        return Finding("shm", "ok", what, data=data)
    w, p, _ = plan_shared_memory(batch_bytes, num_workers, prefetch_factor, shm_free)
    fix = ("docker run --shm-size=8g (or shm_size: 8gb in compose; emptyDir medium Memory in Kubernetes); "
           + (f"create_loader falls back to num_workers={w}, prefetch_factor={p} by itself" if w else
              "create_loader falls back to loading in the main process by itself"))  # fmt: skip
    return Finding("shm", "fail", what + ": workers would die with 'Bus error' or hang", fix, data)


def check_open_files(limits: tuple[int, int] | None, num_workers: int) -> Finding:
    """Whether the open-file limit covers the descriptors shared batches hold in flight."""
    if limits is None:
        return Finding("open-files", "info", "no open-file limit on this platform")
    soft, hard = limits
    data = {"soft": soft, "hard": hard}
    if soft >= LOW_FILE_LIMIT or soft < 0:
        return Finding("open-files", "ok", f"open-file limit {soft} (hard {hard})", data=data)
    if hard >= LOW_FILE_LIMIT or hard < 0:
        return Finding("open-files", "info", f"open-file limit {soft}, hard limit {hard}",
                       "create_loader raises the soft limit to the hard one by itself", data)  # fmt: skip
    return Finding("open-files", "warn" if num_workers else "info",
                   f"open-file limit {soft} (hard {hard}): workers sharing many tensors fail with 'Too many open "
                   "files' or 'received 0 items of ancdata'",
                   "ulimit -n 65536 (docker run --ulimit nofile=65536:65536); meanwhile create_loader uses the "
                   "file_system sharing strategy", data)  # fmt: skip


def check_sharing_strategy(strategy: str, limits: tuple[int, int] | None) -> Finding:
    """The torch.multiprocessing sharing strategy, against the open-file limit it depends on."""
    if strategy == "file_descriptor" and limits is not None and 0 <= limits[1] < LOW_FILE_LIMIT:
        return Finding("sharing-strategy", "warn",
                       f"sharing strategy file_descriptor with a hard open-file limit of {limits[1]}",
                       "torch.multiprocessing.set_sharing_strategy('file_system') (create_loader does it), or "
                       "raise the hard limit", {"strategy": strategy})  # fmt: skip
    note = " (shared files stay in /dev/shm if a process is killed; clean it after crashes)"
    detail = f"sharing strategy {strategy}" + (note if strategy == "file_system" else "")
    return Finding("sharing-strategy", "ok", detail, data={"strategy": strategy})


def check_cpus(num_workers: int, affinity: int, cpu_count: int, quota: float | None) -> Finding:
    """CPUs this process may use (affinity, cgroup quota) against ``num_workers``."""
    usable = affinity if quota is None else max(1, min(affinity, int(quota)))
    data = {"affinity": affinity, "cpu_count": cpu_count, "quota": quota, "usable": usable,
            "num_workers": num_workers}  # fmt: skip
    where = f"{usable} usable CPUs (os.cpu_count() {cpu_count}, affinity {affinity}"
    where += f", cgroup quota {quota:g})" if quota is not None else ")"
    if num_workers > usable:
        return Finding("cpus", "warn", f"{where}; num_workers={num_workers} is more: workers compete for them",
                       f"num_workers={usable} or fewer, or num_workers='auto' (measured); note that os.cpu_count() "
                       "counts the host's CPUs, not the container's", data)  # fmt: skip
    return Finding("cpus", "ok", f"{where}; num_workers={num_workers}", data=data)


def check_cuda(
    initialized: bool, visible_env: str | None, device_count: int | None, start_method: str
) -> list[Finding]:
    """Fork safety of CUDA, and ``CUDA_VISIBLE_DEVICES`` against an already started CUDA."""
    out = []
    if initialized and start_method == "fork":
        out.append(Finding("cuda-fork", "fail",
                           "CUDA is initialised in this process and workers start by fork: a worker that touches "
                           "CUDA dies with 'Cannot re-initialize CUDA in forked subprocess'",
                           "keep CUDA out of Dataset/__getitem__ and transforms (move batches to the GPU in the loop "
                           "or with CUDAPrefetcher), or pass multiprocessing_context='spawn'"))  # fmt: skip
    else:
        state = "initialised" if initialized else "not initialised yet"
        out.append(Finding("cuda-fork", "ok", f"CUDA {state}; workers start by {start_method}"))
    if initialized and visible_env is not None and device_count is not None:
        listed, _ = cuda_visible(visible_env)  # as CUDA reads it (a value it reads otherwise: check_environment)
        if len(listed) != device_count:
            out.append(Finding("cuda-visible-devices", "fail",
                               f"CUDA_VISIBLE_DEVICES={visible_env!r} lists {len(listed)} GPU"
                               f"{'s' * (len(listed) != 1)} but CUDA sees {device_count}: it names GPUs this machine "
                               "lacks (nvidia-smi -L lists those it has), or it was set after CUDA started and is "
                               "ignored", "list GPUs nvidia-smi shows; set it in the shell, or call "
                               "datakit.select_gpus() before CUDA starts"))  # fmt: skip
            return out
    value = "unset (every GPU)" if visible_env is None else repr(visible_env)
    out.append(Finding("cuda-visible-devices", "ok", f"CUDA_VISIBLE_DEVICES {value}"))
    return out


_STRTOUL = re.compile(r"\s*([+-]?[0-9]+)", re.ASCII)  # the number an entry begins with, as C's strtoul reads it


def cuda_visible(value: str) -> tuple[list[str], str | None]:
    """The GPUs CUDA takes from a ``CUDA_VISIBLE_DEVICES`` value, read as torch models CUDA's reading
    (``torch.cuda._parse_visible_devices``): indices, each the number its entry begins with (``'0;1'`` is 0), up
    to the first entry that begins with none or a negative one; or UUIDs (``GPU-``, ``MIG-``, as the first entry
    begins), up to the first entry that begins otherwise; a GPU listed twice: none at all. And why that is not
    every entry as written (None where it is)."""
    entries = value.split(",")
    if not value.strip():
        return [], "an empty list"
    seen: list[str] = []
    prefix = next((p for p in ("GPU-", "MIG-") if value.startswith(p)), None)
    if prefix is not None:
        for e in entries:
            if e in seen:
                return [], f"{e!r} is listed twice"
            if not e.startswith(prefix):
                return seen, f"{e.strip()!r} is not a {prefix} UUID, as the first entry is"
            seen.append(e)
        return seen, None
    note = None
    for e in entries:
        m = _STRTOUL.match(e)
        x = int(m.group(1)) if m else -1
        if str(x) in seen:
            return [], f"GPU {x} is listed twice"
        if x < 0:
            if m:
                return seen, f"{e.strip()!r} ends the list (a negative index)"
            return seen, f"{e.strip()!r} is neither an index nor a GPU-/MIG- UUID"
        if note is None and e.strip() != str(x) and e.strip() != m.group(1).strip():  # type: ignore[union-attr]
            note = f"{e.strip()!r} is read as GPU {x} (the number it begins with)"
        seen.append(str(x))
    return seen, note


def check_environment(env: Mapping[str, str], usable_cpus: int) -> list[Finding]:
    """The variables that change what every loader or GPU job does, read as their readers read them:
    ``DATAKIT_NUM_WORKERS`` (create_loader), ``DATAKIT_MAX_PIXELS`` (every decode), ``CUDA_VISIBLE_DEVICES``
    (CUDA), ``OMP_NUM_THREADS`` (OpenMP)."""
    out = []
    forced = env.get("DATAKIT_NUM_WORKERS") or None  # empty: unset, as create_loader takes it
    if forced is not None:
        # as create_loader reads it: ASCII digits (no sign, no '_', no other script's digits), spaces around
        n = int(forced) if forced.strip().isascii() and forced.strip().isdigit() else -1
        from datakit.tuning import worker_room

        room = worker_room(n) if n >= 0 else None
        if n < 0 or room is not None:
            why = room if room is not None else "a whole number >= 0"
            out.append(Finding("datakit-num-workers", "fail", f"DATAKIT_NUM_WORKERS={forced!r}: create_loader "
                               f"refuses it ({why})", "unset it, or set a number of workers"))  # fmt: skip
        elif n > usable_cpus:
            out.append(Finding("datakit-num-workers", "warn", f"DATAKIT_NUM_WORKERS={n} forces {n} workers in every "
                               f"create_loader, more than the {usable_cpus} usable CPUs (each loader is slower so)",
                               "unset it, so that create_loader tunes num_workers"))  # fmt: skip
        else:
            out.append(Finding("datakit-num-workers", "info", f"DATAKIT_NUM_WORKERS={n} forces {n} workers in every "
                               "create_loader (num_workers= and the tuning are not used)"))  # fmt: skip
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus, why = cuda_visible(visible)
        if why is not None:
            label = "GPU " if gpus and gpus[0].isdigit() else ""
            shown = f"only {label}{','.join(gpus)} {'is' if len(gpus) == 1 else 'are'} visible" if gpus else (
                "CUDA sees no GPU")  # fmt: skip
            stops = not ("listed twice" in why or "read as" in why or not visible.strip())
            how = "CUDA stops reading there: " if stops else ""
            fix = "unset it to use every GPU, or list indices or UUIDs: 0,1"
            out.append(Finding("cuda-visible-devices-value", "warn", f"CUDA_VISIBLE_DEVICES={visible!r}: {why}; "
                               f"{how}{shown}", fix))  # fmt: skip
    budget = env.get("DATAKIT_MAX_PIXELS")
    if budget is not None:
        try:
            ok = int(budget.replace("_", "")) >= 1
        except ValueError:
            ok = False
        if not ok:
            out.append(Finding("datakit-max-pixels", "fail", f"DATAKIT_MAX_PIXELS={budget!r}: every decode refuses "
                               "it (a positive whole number of pixels)", "unset it, or set the pixel budget a "
                               "decoded image may have"))  # fmt: skip
    threads = env.get("OMP_NUM_THREADS")
    if threads is not None:
        # as libgomp reads it (strtoul): positive decimal numbers (ASCII digits, a '+' and spaces allowed), one per
        # nesting level, each under 2**63
        ok = re.fullmatch(r"\s*\+?[0-9]+\s*(?:,\s*\+?[0-9]+\s*)*", threads, re.ASCII) is not None and all(
            1 <= int(n) < 2**63 for n in threads.split(",")
        )
        if not ok:
            out.append(Finding("omp-num-threads", "warn", f"OMP_NUM_THREADS={threads!r} is no positive whole number: "
                               "OpenMP ignores it (\"Invalid value\") and each process, every loader worker too, "
                               "starts a thread per core", "set it to 1 for loader workers, or unset it"))  # fmt: skip
    return out


def check_opencv(threads: int | None, start_method: str) -> Finding:
    """OpenCV's thread pool: inherited by forked workers it can deadlock; multiplied, it oversubscribes."""
    if threads is None:
        return Finding("opencv", "info", "OpenCV not installed")
    if threads > 1:
        return Finding("opencv", "info",
                       f"OpenCV uses {threads} threads in this process; with {start_method}-started workers each "
                       "would run as many (and a pool inherited across fork can deadlock)",
                       "create_loader calls cv2.setNumThreads(0) in every worker (and sets OPENCV_FOR_THREADS_NUM=1 "
                       "for spawned ones); in your own DataLoader pass a worker_init_fn that calls "
                       "cv2.setNumThreads(0), not 1 (after fork, resizing the inherited pool to 1 thread can hang), "
                       "or datakit.loader.WorkerInit()", {"threads": threads})  # fmt: skip
    return Finding("opencv", "ok", f"OpenCV uses {threads} thread", data={"threads": threads})


def check_jpeg_region(built: bool, why: str | None = None) -> Finding:
    """Whether the compiled JPEG region decoder was built when the package was installed, and, where it is there,
    ``why`` it cannot be used here (a library it links missing, another libjpeg than its headers')."""
    if built:
        return Finding("jpeg-region", "ok", "JPEG region decoder built: train_pipeline decodes only each crop's pixels")
    if why and why.startswith("built from another version of its source"):
        return Finding("jpeg-region", "warn",
                       f"JPEG region decoder not used ({why}): train_pipeline decodes whole images at the crop's "
                       "scale, about 1.3x slower",
                       "the binary is older than its source: a rebuild whose compile failed kept an earlier build's; "
                       "remove the build/ folder and reinstall datakit from source (pip's output then says why the "
                       "compile fails: install libjpeg-turbo's headers and a C compiler)")  # fmt: skip
    if why:
        return Finding("jpeg-region", "warn",
                       f"JPEG region decoder built but not usable here ({why}): train_pipeline decodes whole images "
                       "at the crop's scale, about 1.3x slower",
                       "it was built against another libjpeg than this machine has (a wheel built elsewhere, or "
                       "headers of one libjpeg-turbo and the library of another): reinstall datakit from source on "
                       "this machine (pip install --force-reinstall --no-deps path/to/datakit)")  # fmt: skip
    return Finding("jpeg-region", "warn",
                   "JPEG region decoder not built (no C compiler or no libjpeg-turbo headers at install time): "
                   "train_pipeline decodes whole images at the crop's scale and OpenCV resizes them, about 1.3x "
                   "slower (values may differ by one level from the compiled resize's)",
                   "install libjpeg-turbo's headers (Debian: libjpeg62-turbo-dev, Ubuntu: libjpeg-turbo8-dev, "
                   "Fedora: libjpeg-turbo-devel) and a C compiler, then reinstall datakit")  # fmt: skip


def check_versions(versions: dict[str, str | None]) -> Finding:
    """The versions that matter, and whether torchvision was built for this torch (0.N+15 for 2.N)."""
    text = ", ".join(f"{k} {v or 'missing'}" for k, v in versions.items())
    tv, t = versions.get("torchvision"), versions.get("torch")
    if tv and t:
        try:
            t_major, t_minor = (int(x) for x in t.split("+")[0].split(".")[:2])
            tv_minor = int(tv.split("+")[0].split(".")[1])
        except (ValueError, IndexError):
            t_major = 0
        if t_major == 2 and tv_minor != t_minor + 15:
            return Finding("versions", "fail", f"{text}: torchvision {tv} is not built for torch {t}",
                           f"pip install torchvision==0.{t_minor + 15}.* (matching torch {t})", versions)  # fmt: skip
    missing = [k for k in ("torch", "torchvision") if not versions.get(k)]
    if missing:
        return Finding("versions", "fail", text, f"pip install {' '.join(missing)}", versions)
    return Finding("versions", "ok", text, data=versions)


# ---------------------------------------------------------------------------------------------
# the source


def _source_files(src: str | os.PathLike, max_files: int) -> list[Path]:
    from datakit.io import IMAGE_EXTENSIONS
    from datakit.labels import EXCEL_SUFFIXES, TEXT_SUFFIXES

    path = Path(src)
    if path.is_dir() and (path / "data.mdb").exists():
        return [path / "data.mdb"]
    found: list[Path] = []
    if path.is_file() and path.suffix.lower() in EXCEL_SUFFIXES + TEXT_SUFFIXES:
        # a table alone: the images it names, relative to its folder (the table itself says nothing of the disk)
        from datakit.labels import read_labels

        table = read_labels(path, validate=False)
        found = [p for p in dict.fromkeys(path.parent / table.files[i] for i in range(len(table))) if p.is_file()]
        if not found and len(table):  # its images under another folder: check's usage error, naming it
            from datakit.datasets import open_dataset

            open_dataset(path)
    elif path.is_file():
        return [path]
    for dirpath, _, names in sorted(os.walk(path)) if path.is_dir() else ():
        for n in sorted(names):
            # (a link to nothing among them is no file to read: it aborted the run, the other findings lost)
            if n.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(dirpath, n)):
                found.append(Path(dirpath) / n)
    if len(found) > max_files:  # evenly spread, so one folder does not stand for all
        step = len(found) / max_files
        found = [found[int(k * step)] for k in range(max_files)]
    return found


def _read_all(files: list[Path], max_bytes: int) -> tuple[int, int, float]:
    total, count = 0, 0
    t0 = time.perf_counter()
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while total < max_bytes:
                chunk = f.read(min(8 * MIB, max_bytes - total))
                if not chunk:
                    break
                total += len(chunk)
        count += 1
        if total >= max_bytes:
            break
    return total, count, time.perf_counter() - t0


def _evict(files: list[Path]) -> bool:
    """Ask the kernel to drop these files from the page cache (no root needed); False if it cannot."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def read_speed(src: str | os.PathLike | Sequence[str | os.PathLike], *, max_files: int = 2000,
               max_bytes: int = 256 * MIB) -> Finding:  # fmt: skip
    """Read speed of the source's files, cold (dropped from the page cache first) and warm; a list is the
    shards of one pack, read together."""
    if isinstance(src, (list, tuple)):
        files = [f for s in src for f in _source_files(s, max_files)]
        src = os.fspath(src[0]) + (f" and {len(src) - 1} more" if len(src) > 1 else "")
    else:
        files = _source_files(src, max_files)
    if not files:
        # (the data the training would read is not there: the run must not end "ok")
        return Finding("read-speed", "fail", f"{src}: no image files found to read",
                       "give the folder, zip, label table or pack that holds the images")  # fmt: skip
    cold_ok = _evict(files)
    nbytes, count, cold = _read_all(files, max_bytes)
    _, _, warm = _read_all(files[:count], max_bytes)
    cold, warm = max(cold, 1e-9), max(warm, 1e-9)
    data = {"files": count, "bytes": nbytes, "cold_mb_s": nbytes / MIB / cold, "warm_mb_s": nbytes / MIB / warm,
            "cold_files_s": count / cold, "warm_files_s": count / warm, "evicted": cold_ok}  # fmt: skip
    label = "cold" if cold_ok else "first read (could not drop the page cache)"
    detail = (f"{src}: {count} files, {nbytes / MIB:.1f} MiB: {label} {data['cold_mb_s']:.0f} MB/s "
              f"({data['cold_files_s']:.0f} files/s), warm {data['warm_mb_s']:.0f} MB/s "
              f"({data['warm_files_s']:.0f} files/s)")  # fmt: skip
    packs = all(f.name == "data.mdb" for f in files)
    # over 2 ms a file, for files under 1 MiB: the disk's latency, not its bandwidth (a 5 MB photo takes that
    # long at 2.5 GB/s, and one file of them all reads no faster)
    if count > 1 and cold / count > 2e-3 and nbytes / count < MIB and not packs:
        return Finding("read-speed", "warn", detail + "; small files read slowly when not cached",
                       f"pack them into one file: datakit pack-lmdb {src} OUT.lmdb", data)  # fmt: skip
    return Finding("read-speed", "ok", detail, data=data)


# ---------------------------------------------------------------------------------------------
# gathering


def _cgroup_cpu_quota() -> float | None:
    from datakit.parallel import cgroup_cpu_quota

    return cgroup_cpu_quota()


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except ImportError:
        return None
    return str(getattr(mod, "__version__", None) or getattr(mod, "version", lambda: "?")())


def doctor(src: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *, batch_size: int = 64,
           num_workers: int | None = None, prefetch_factor: int = 4, size: int = 224) -> DoctorReport:  # fmt: skip
    """Check the environment for a loader of ``batch_size`` uint8 images of ``size`` x ``size``
    with ``num_workers`` (default: the usable CPUs) and ``prefetch_factor``; and, with ``src``,
    how fast its files read. ``size=0`` takes the first image of ``src`` at full size."""
    import multiprocessing as mp

    import torch

    from datakit.loader import shm_free_bytes
    from datakit.parallel import usable_cpus

    if num_workers is None:
        num_workers = usable_cpus()
    batch_bytes = batch_size * 3 * size * size
    packs = src if isinstance(src, (list, tuple)) else [src] if src is not None else []
    if packs and all(os.path.isfile(os.path.join(p, "data.mdb")) for p in packs):
        from datakit.datasets import open_dataset

        open_dataset(list(packs) if len(packs) > 1 else packs[0])  # read as check reads them: every shard, once
    if src is not None and not size:
        from datakit import datasets
        from datakit.sources import open_source

        img, _ = open_source(src, kinds=datasets)[0]  # one image's size: no split to speak of
        batch_bytes = batch_size * img.nbytes
    report = DoctorReport()
    shm_total = None
    try:
        st = os.statvfs("/dev/shm")
        shm_total = st.f_blocks * st.f_frsize
    except (OSError, AttributeError):
        pass
    report.findings.append(check_shm(batch_bytes, num_workers, prefetch_factor, shm_free_bytes(), shm_total))
    try:
        import resource

        limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    except ImportError:
        limits = None
    report.findings.append(check_open_files(limits, num_workers))
    import torch.multiprocessing as tmp

    report.findings.append(check_sharing_strategy(tmp.get_sharing_strategy(), limits))
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cpus = check_cpus(num_workers, affinity, os.cpu_count() or 1, _cgroup_cpu_quota())
    report.findings.append(cpus)
    start = mp.get_start_method(allow_none=True) or ("fork" if sys.platform.startswith("linux") else "spawn")
    from datakit.devices import _cuda_started

    initialized = _cuda_started()  # torch.cuda.is_available() starts the driver too, without torch's flag
    count = torch.cuda.device_count() if initialized else None
    report.findings += check_cuda(initialized, os.environ.get("CUDA_VISIBLE_DEVICES"), count, start)
    report.findings += check_environment(os.environ, cpus.data["usable"])
    try:
        import cv2

        threads = cv2.getNumThreads()
    except ImportError:
        threads = None
    report.findings.append(check_opencv(threads, start))
    import datakit.io as dio

    report.findings.append(check_jpeg_region(dio.region_decoder_available(), dio._REGION_WHY))
    names = ("torch", "torchvision", "cv2", "lmdb", "PIL", "numpy")
    versions = {"python": sys.version.split()[0], **{("opencv" if n == "cv2" else n): _version(n) for n in names}}
    report.findings.append(check_versions(versions))
    if src is not None:
        report.findings.append(read_speed(src))
    return report
