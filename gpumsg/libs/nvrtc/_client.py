"""``dev.nvrtc`` (also ``dev.compile``, ``dev.launch``, ``dev.load_module``): compile CUDA C++
with NVRTC on a helper thread of the caller's process, load it on the device, launch it as a
message (caller's threads)."""

from __future__ import annotations

import marshal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidMessage
from ...messages._base import BufRef, as_ref, checked_flag
from ...messages.nvrtc import Kernel, Launch, LoadModule, Untyped
from .._loader import LibraryNotFound
from ._compiler import compile_program
from ._signature import (
    explicit_params,
    explicit_pointer_dtypes,
    kernel_params,
    pointer_dtypes,
)
from ._sim import SIM_CHECKS, sim_image

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["Nvrtc"]

#: launch messages kept for repeated calls, per device (when full it starts again)
_MEMO_SIZE = 256
#: how a launch argument's type enters the memo key (:func:`_launch_key`), found once per type
_PLAIN, _NUMPY, _OTHER = "plain", "numpy", "other"
_ARG_KIND: dict[type, str] = {int: _PLAIN, float: _PLAIN, bool: _PLAIN, str: _PLAIN,
                              type(None): _PLAIN}

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpumsg-nvrtc")
    return _POOL


def _strs(value: Any, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        raise InvalidMessage(f"{field}: expected a sequence of strings, got {value!r}",
                             field=field)
    return tuple(value)


class Nvrtc:
    """User kernels on one device (``dev.nvrtc``)."""

    def __init__(self, device: Device) -> None:
        self._dev = device
        self._memo: dict[tuple, list] = {}
        #: kind of launch (:func:`_kind_of`) -> the :class:`_Plan` of its first checked message
        self._plans: dict[tuple, _Plan] = {}

    def _arch(self) -> str:
        major, minor = self._dev.props.compute_capability
        return f"sm_{major}{minor}"

    def compile(self, source: str, name: str, options: Any = (), headers: Any = None,
                name_expressions: Any = (), signature: Any = None,
                cache: bool = True) -> Future:
        """Compile ``source`` with NVRTC for this device (``-arch=sm_XX`` from its compute
        capability unless ``options`` name one) and load it here; the future resolves to the
        :class:`Kernel` ``name``: an ``extern "C"`` function, a C++ function or a template
        instance such as ``"scale<float>"`` (added as a name expression with
        ``name_expressions``). ``headers`` maps include names to their text. Parameter types come
        from the declaration in ``source`` unless ``signature`` (ctypes types or kind names)
        is given. Fails with :class:`~gpumsg.errors.CompileError` carrying NVRTC's log. The image
        is cached on disk (see ``compiler.py``; ``cache=False`` compiles anew and keeps nothing)
        and the module once per device. On the simulator the kernel runs its registered NumPy
        version (``sim.sim_kernel``); the source is still compiled when NVRTC is installed, so
        compile errors surface there too."""
        dev = self._dev
        dev.port.check_open()
        if not isinstance(source, str) or not source.strip():
            raise InvalidMessage("source: expected CUDA C++ source text", field="source")
        if not isinstance(name, str) or not name.strip():
            raise InvalidMessage("name: expected the kernel's name", field="name")
        checked_flag(cache, "cache")
        opts = _strs(options, "options")
        exprs = tuple(dict.fromkeys((name,) + _strs(name_expressions, "name_expressions")))
        if headers is None:
            headers = {}
        if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise InvalidMessage("headers: expected a dict of include name -> text",
                                 field="headers")
        params = (explicit_params(signature, name) if signature is not None
                  else kernel_params(source, name))  # typed at the call site
        pointees = (explicit_pointer_dtypes(signature) if signature is not None
                    else pointer_dtypes(source, name))
        arch = self._arch()
        for o in opts:
            if o.startswith(("-arch=", "--gpu-architecture=")):
                arch = o.split("=", 1)[1]
        simulated = dev.backend != "cuda"
        token = dev.port.token
        out: Future = Future()

        def work() -> None:
            try:
                try:
                    program = compile_program(source, name, arch, opts, headers, exprs, cache)
                except LibraryNotFound:
                    if not simulated:
                        raise
                    program = None  # the simulator without NVRTC: the registry alone
                if simulated:
                    check = SIM_CHECKS.get(name)
                    if check is not None:  # what its NumPy version cannot run, refused here
                        check()
                    key = program.key if program is not None else f"sim:{name}"
                    msg = LoadModule(key, sim_image(name), "sim", (name,))
                    symbol = name
                else:
                    assert program is not None
                    symbol = program.lowered[name]
                    msg = LoadModule(program.key, program.image, program.kind, (symbol,))
                dev.send(msg).result()
                out.set_result(Kernel(token, msg.key, name, symbol, params,
                                      program is not None and program.from_cache, pointees))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's future
                out.set_exception(exc)

        _pool().submit(work)
        return out

    def load_module(self, image: bytes, kernels: dict[str, Any]) -> Future:
        """Load a precompiled CUBIN or PTX ``image``; ``kernels`` maps each kernel's symbol to
        its signature (ctypes types or kind names). Resolves to ``{symbol: Kernel}``. On the
        simulator the symbols name registered NumPy kernels."""
        import hashlib

        dev = self._dev
        dev.port.check_open()
        if not isinstance(image, (bytes, bytearray)) or not image:
            raise InvalidMessage("image: expected the bytes of a CUBIN or PTX image",
                                 field="image")
        if not isinstance(kernels, dict) or not kernels:
            raise InvalidMessage("kernels: expected {symbol: signature}", field="kernels")
        image = bytes(image)
        params = {s: explicit_params(sig, s) for s, sig in kernels.items()}
        pointees = {s: explicit_pointer_dtypes(sig) for s, sig in kernels.items()}
        kind = "sim" if dev.backend != "cuda" else (
            "cubin" if image[:4] == b"\x7fELF" else "ptx")
        key = hashlib.sha256(image).hexdigest()
        done = dev.send(LoadModule(key, image, kind, tuple(kernels)))
        token = dev.port.token
        out: Future = Future()

        def resolve(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
            else:
                out.set_result({s: Kernel(token, key, s, s, p, False, pointees[s])
                                for s, p in params.items()})

        done.add_done_callback(resolve)
        return out

    def untyped(self, buffer: Any) -> Untyped:
        """``buffer`` as a launch argument whose dtype is not checked against the element type
        its pointer parameter declares: the explicit cast (a ``float*`` reading f64 memory as
        floats, say). Without it such a launch is refused."""
        as_ref(buffer, "buffer")  # a buffer (or its future) of a live device, else refused
        return Untyped(buffer)

    def launch(self, kernel: Kernel, grid: Any, block: Any, args: Any = (), shared: int = 0,
               reads: Any = None, writes: Any = None) -> Future:
        """Launch ``kernel`` on the compute stream (see :class:`~gpumsg.messages.nvrtc.Launch`);
        a future of None. A repeated launch (the same kernel, buffers and values) posts the
        message it built and checked the first time; a launch of a kind seen before (the same
        kernel, values, buffer dtypes and which arguments are the same buffer, other buffers)
        builds its message from that kind's checked one, the buffers swapped in."""
        if isinstance(kernel, Future):
            kernel = kernel.result()
        if isinstance(args, list):
            args = tuple(args)
        dev = self._dev
        key, refs = _launch_key(kernel, grid, block, args, shared, reads, writes)
        entry = self._memo.get(key) if key is not None else None
        if entry is None:
            kind = _kind_of(key, refs) if key is not None else None
            plan = self._plans.get(kind) if kind is not None else None
            if plan is not None:
                msg = plan.build(refs)
            else:
                if type(kernel) is Kernel and kernel.owner != dev.port.token:
                    raise InvalidMessage(f"kernel: {kernel.name!r} was compiled for another "
                                         "device", field="kernel")
                msg = Launch(kernel, grid, block, args, shared, reads, writes)
            entry = [msg, None]
            if key is not None and _holds(msg, kernel, refs):
                memo = self._memo
                if len(memo) >= _MEMO_SIZE:
                    memo.clear()
                memo[key] = entry
                if plan is None:
                    plan = _Plan.of(msg, refs)
                    if plan is not None:
                        plans = self._plans
                        if len(plans) >= _MEMO_SIZE:
                            plans.clear()
                        plans[kind] = plan  # type: ignore[index]
        return dev.port.send_memo(entry)


def _launch_key(kernel: Any, grid: Any, block: Any, args: Any, shared: Any, reads: Any,
                writes: Any) -> tuple[tuple | None, list[BufRef]]:
    """The memo key of a launch and the references it names, or (None, []) for a call that is
    not kept. The key holds the kernel and each buffer's reference by identity (the kept
    message holds them; taking a buffer's ``ref`` raises for a freed or stale buffer), and
    everything else by its marshal encoding, which writes each value's type with it
    (``True``, ``1`` and ``1.0`` differ, as do ``0.0`` and ``-0.0``); a NumPy scalar by its
    type and bytes."""
    if type(kernel) is not Kernel or type(args) is not tuple:
        return None, []
    refs: list[BufRef] = []
    values: list[Any] = []
    numpy: list[tuple] = []
    for a in args:
        t = type(a)
        kind = _ARG_KIND.get(t)
        if kind is None:
            kind = _ARG_KIND[t] = _NUMPY if issubclass(t, np.generic) else _OTHER
        if kind is _PLAIN:
            values.append(a)
        elif kind is _NUMPY:
            numpy.append((t, a.tobytes()))
            values.append(None)
        else:
            ref = a if t is BufRef else getattr(a, "ref", None)
            if ref is None:
                values.append(a)  # marshal writes it, or the call is not kept
            elif type(ref) is BufRef:
                refs.append(ref)
                values.append(None)
            else:  # host memory or another kind of reference: checked every time
                return None, []
    named: list[Any] = []
    for field in (reads, writes):
        if field is None:
            named.append(None)
            continue
        items = field if isinstance(field, (tuple, list)) else (field,)
        for item in items:
            ref = item if type(item) is BufRef else getattr(item, "ref", None)
            if type(ref) is not BufRef:
                return None, []
            refs.append(ref)
        named.append(len(items))
    try:
        blob = marshal.dumps((grid, block, shared, tuple(values), tuple(named)), 2)
    except ValueError:  # an argument marshal cannot write: checked every time
        return None, []
    return (id(kernel), *map(id, refs), blob, *numpy), refs


def _kind_of(key: tuple, refs: list[BufRef]) -> tuple:
    """The kind of a launch whose memo key is ``key``: the key without the buffers' identities,
    with each buffer's dtype and the position of its first occurrence among ``refs`` (which
    arguments and declared reads and writes are the same buffer). Two launches of one kind
    pass or fail :class:`Launch`'s checks alike: those read a buffer's dtype and which
    arguments the reads and writes name, never its size or contents."""
    first: dict[int, int] = {}
    return (key[0], key[1 + len(refs):], tuple(r.dtype for r in refs),
            tuple(first.setdefault(r.id, i) for i, r in enumerate(refs)))


class _Plan:
    """A checked launch message and where its buffers sit, to build the message of another
    launch of its kind (:func:`_kind_of`) with that launch's buffers, unchecked."""

    __slots__ = ("msg", "args", "reads", "writes", "scratch")

    def __init__(self, msg: Launch, args: tuple, reads: tuple, writes: tuple,
                 scratch: tuple) -> None:
        self.msg = msg
        self.args = args  # (position in msg.args, index in refs) of each buffer argument
        self.reads, self.writes, self.scratch = reads, writes, scratch  # indices in refs

    @classmethod
    def of(cls, msg: Launch, refs: list[BufRef]) -> _Plan | None:
        """The plan of ``msg``, checked, built from a call naming ``refs`` (None if one of its
        buffers is not among them)."""
        index: dict[int, int] = {}
        for i, r in enumerate(refs):
            index.setdefault(r.id, i)
        try:
            args = tuple((p, index[a.id]) for p, a in enumerate(msg.args) if type(a) is BufRef)
            return cls(msg, args, *(tuple(index[r.id] for r in field)
                                    for field in (msg.reads, msg.writes, msg.scratch)))
        except KeyError:
            return None

    def build(self, refs: list[BufRef]) -> Launch:
        m = self.msg
        args = list(m.args)
        for p, i in self.args:
            args[p] = refs[i]
        return Launch.unchecked(  # type: ignore[attr-defined]
            m.kernel, m.grid, m.block, tuple(args), m.shared,
            tuple(refs[i] for i in self.reads), tuple(refs[i] for i in self.writes),
            tuple(refs[i] for i in self.scratch))


def _holds(msg: Launch, kernel: Kernel, refs: list[BufRef]) -> bool:
    """Whether ``msg`` holds the kernel and every reference of its key, so that the ids in
    the key cannot be reused while the kept message lives."""
    if msg.kernel is not kernel:
        return False
    held = {id(a) for a in msg.args if type(a) is BufRef}
    held.update(id(r) for r in msg.reads)
    held.update(id(r) for r in msg.writes)
    return all(id(r) in held for r in refs)
