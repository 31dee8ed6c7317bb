"""Compiling CUDA C++ with NVRTC on the caller's side, with an on-disk cache of the images.

:func:`compile_program` runs on the calling thread (NVRTC takes tens to hundreds of milliseconds:
never the device thread's time). The cache key hashes everything that changes the image: source,
options, headers, name expressions, architecture and NVRTC version. Entries live in
``$GPUMSG_CACHE_DIR`` or ``$XDG_CACHE_HOME/gpumsg/nvrtc`` (``~/.cache/gpumsg/nvrtc``), one file
per key, written to a temporary file in the same folder and renamed into place, so two processes
filling the cache at once each see either no entry or a whole one.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import tempfile
from typing import Any

from ...config import setting
from ...errors import CompileError, LibraryError
from .._loader import load
from ._bindings import COMPILATION_ERROR

__all__ = ["Program", "compile_program", "cache_dir", "nvrtc_version"]

_MAGIC = b"GPUMSG-NVRTC-1\n"


@dataclasses.dataclass(frozen=True)
class Program:
    """A compiled image: ``kind`` ("cubin" or "ptx"), the lowered symbol of each requested name,
    the compiler log and whether it came from the disk cache."""

    key: str
    image: bytes
    kind: str
    lowered: dict[str, str]
    log: str
    from_cache: bool


def cache_dir() -> str:
    """The folder of the on-disk image cache."""
    path = setting("GPUMSG_CACHE_DIR")
    if not path:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "gpumsg", "nvrtc")
    return path


def _lib() -> Any:
    return load("nvrtc")


def nvrtc_version() -> str:
    return _lib().version()


def _check(lib: Any, status: int, function: str) -> None:
    if status:
        raw = lib.nvrtcGetErrorString(status)
        raise LibraryError("nvrtc", status, raw.decode() if raw else f"NVRTC_{status}", function)


def _strings(items: list[str]) -> Any:
    arr = (ctypes.c_char_p * max(len(items), 1))()
    for i, s in enumerate(items):
        arr[i] = s.encode()
    return arr


def _read(lib: Any, prog: Any, size_fn: str, get_fn: str) -> bytes:
    size = ctypes.c_size_t()
    _check(lib, getattr(lib, size_fn)(prog, ctypes.byref(size)), size_fn)
    buf = ctypes.create_string_buffer(size.value)
    _check(lib, getattr(lib, get_fn)(prog, buf), get_fn)
    return buf.raw[:size.value]


def _compile(source: str, name: str, options: list[str], headers: dict[str, str],
             expressions: list[str], want: str) -> tuple[bytes, dict[str, str], str]:
    lib = _lib()
    prog = ctypes.c_void_p()
    hnames = list(headers)
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(),
                                       len(hnames), _strings([headers[h] for h in hnames]),
                                       _strings(hnames)), "nvrtcCreateProgram")
    try:
        for e in expressions:
            _check(lib, lib.nvrtcAddNameExpression(prog, e.encode()), "nvrtcAddNameExpression")
        status = lib.nvrtcCompileProgram(prog, len(options), _strings(options))
        log = _read(lib, prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog")
        log_text = log.rstrip(b"\0").decode(errors="replace").strip()
        if status == COMPILATION_ERROR or (status and log_text):
            raise CompileError(f"NVRTC could not compile {name!r}", log=log_text, name=name)
        _check(lib, status, "nvrtcCompileProgram")
        lowered = {}
        for e in expressions:
            out = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, e.encode(), ctypes.byref(out)),
                   "nvrtcGetLoweredName")
            lowered[e] = out.value.decode()  # type: ignore[union-attr]
        if want == "cubin":
            image = _read(lib, prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
        else:
            image = _read(lib, prog, "nvrtcGetPTXSize", "nvrtcGetPTX")
        return image, lowered, log_text
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _load_entry(path: str, key: str) -> Program | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if not data.startswith(_MAGIC):
        return None
    head, sep, image = data[len(_MAGIC):].partition(b"\n")
    if not sep:
        return None
    try:
        meta = json.loads(head)
    except ValueError:
        return None
    if meta.get("key") != key or len(image) != meta.get("size"):
        return None  # a stray or damaged file: compile again and overwrite it
    return Program(key, image, meta["kind"], meta["lowered"], meta.get("log", ""), True)


def _store(folder: str, path: str, program: Program) -> None:
    meta = json.dumps({"key": program.key, "kind": program.kind, "lowered": program.lowered,
                       "log": program.log, "size": len(program.image)}).encode()
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + meta + b"\n" + program.image)
            os.replace(tmp, path)  # atomic: readers see the old entry or the whole new one
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only or full cache folder only costs the next process a compile


def compile_program(source: str, name: str, arch: str, options: tuple[str, ...] = (),
                    headers: dict[str, str] | None = None,
                    name_expressions: tuple[str, ...] = (), use_cache: bool = True) -> Program:
    """Compile ``source`` for ``arch`` (``"sm_90"``: a CUBIN; ``"compute_90"``: PTX), through
    the disk cache. Raises :class:`CompileError` with NVRTC's log when the program is refused."""
    headers = dict(headers or {})
    opts = [o for o in options if not o.startswith(("-arch", "--gpu-architecture"))]
    opts.insert(0, f"-arch={arch}")
    want = "cubin" if arch.startswith("sm_") else "ptx"
    version = nvrtc_version()
    key = hashlib.sha256(json.dumps(
        [source, name, opts, sorted(headers.items()), list(name_expressions), arch, version],
        separators=(",", ":")).encode()).hexdigest()
    folder = cache_dir()
    path = os.path.join(folder, f"{key}.{want}")
    if use_cache:
        hit = _load_entry(path, key)
        if hit is not None:
            return hit
    image, lowered, log = _compile(source, name, opts, headers, list(name_expressions), want)
    program = Program(key, image, want, lowered, log, False)
    if use_cache:
        _store(folder, path, program)
    return program
