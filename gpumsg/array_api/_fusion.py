"""Automatic fusion of element-wise chains: results held back as expressions until memory is
needed, then generated as one kernel.

An element-wise call (an operator, a function of the standard's element-wise table, ``where``,
``clip``, ``astype``) answers an array at once, as every call does; with fusion on (the default)
that array is *pending*: a :class:`Node` of an expression over the arrays it reads (leaves),
Python scalars and other pending nodes. No message is sent. The expression is computed when
something needs memory, and at that moment **every pending result still referenced** (a
wrapper alive: weak references tell) is computed, one generated kernel per result shape (per
:data:`MAX_OUTPUTS` results or :data:`MAX_KERNEL_INPUTS` inputs), whose outputs are exactly
those results; intermediates nobody references are computed in registers
and never stored. The moments:

- anything that touches an array's memory other than an element-wise call or a reduction:
  reading values, a view, indexing, ``matmul``, sorting, linalg, fft, DLPack, ``.buffer``, an
  in-place update (``x += 1``, ``x[...] = v``), a user's ``ElementwiseKernel``;
- any message posted to any device (a library call, a copy, a user's own ``dev.launch``,
  ``synchronize``), through the hook the client runs before each post
  (:func:`gpumsg.client._device.set_before_post`), so that no later write to a leaf can
  overtake a pending read of it;
- a chain reaching :data:`MAX_OPS` operations or :data:`MAX_INPUTS` array inputs: the call
  first computes what is pending and starts a new chain from the results.

A reduction of a pending array reads the leaves and computes the chain inside the reduction
kernel; the pending array itself stays pending (computed later only if it is still referenced
when memory is next needed). Pending nodes only ever write memory they allocate, and every
write to existing memory goes through one of the moments above, so the order of reads and
writes is the program's whatever the timing.

Fusion is off with ``gpumsg.configure(array_fusion=False)`` (``GPUMSG_ARRAY_FUSION=0``, read
at the first element-wise call and again after each change of the configuration) or within
``with gpumsg.array_api.fusion(False):``; :func:`fusion_stats` counts the kernels.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..client._device import set_before_post
from ..config import config, setting
from ..messages.device import Alloc
from ..messages.nvrtc import LoadModule
from ._codegen import ElementwiseSpec, Operand, _c_strides, elementwise_new, program
from ._expr import Node as Tree
from ._expr import cast_name, render_text

__all__ = ["MAX_OPS", "MAX_INPUTS", "MAX_OUTPUTS", "MAX_KERNEL_INPUTS", "Node", "Leaf",
           "defer", "flush", "fusion", "fusion_stats", "enabled", "quiet", "chain_of"]

#: the most operations one pending chain holds before it is computed
MAX_OPS = 32
#: the most array inputs (leaves) one pending chain reads before it is computed
MAX_INPUTS = 16
_OFF = ("0", "no", "off", "false")

_lock = threading.RLock()


class _ThreadState(threading.local):
    """This thread's switches, their defaults as class attributes: a thread that never set
    one reads the default without the missing attribute's AttributeError (about 0.3 µs, paid
    by every element-wise call)."""

    #: the innermost ``fusion(...)`` block's setting (None: the ``array_fusion`` option)
    forced: bool | None = None
    #: inside ``quiet()``: posts leave pending work pending
    quiet: bool = False
    #: inside ``flush()``: a nested flush returns at once
    flushing: bool = False


_tls = _ThreadState()
_seq = itertools.count()
#: creation number -> weak reference to a pending wrapper (an Array), while the wrapper lives
#: (its reference's callback removes the entry); in creation order, as dicts keep it
_live: dict[int, weakref.KeyedRef] = {}
_stats = {"kernels": 0, "reductions": 0, "operations": 0}
#: flushes under way: while one is, other threads' posts and reads wait for it (under _lock)
_inflight = 0


def _gone(ref: weakref.KeyedRef) -> None:
    _live.pop(ref.key, None)


class Leaf:
    """An array in memory read by a pending chain: buffer, dtype, element offset, strides."""

    __slots__ = ("buffer", "dtype", "offset", "strides", "shape")

    def __init__(self, buffer: Any, dtype: np.dtype, offset: int, strides: tuple[int, ...],
                 shape: tuple[int, ...]) -> None:
        self.buffer, self.dtype, self.offset = buffer, dtype, offset
        self.strides, self.shape = strides, shape

    def key(self) -> tuple:
        return (id(self.buffer), self.dtype, self.offset, self.strides, self.shape)

    def operand(self, shape: tuple[int, ...], order: tuple[int, ...] | None = None) -> Operand:
        """As a kernel operand broadcast to ``shape``, its dimensions taken in ``order``."""
        if shape == self.shape:
            st = self.strides
        else:
            pad = len(shape) - len(self.shape)
            st = (0,) * pad + tuple(0 if d == 1 and shape[pad + k] != 1 else s
                                    for k, (d, s) in enumerate(zip(self.shape, self.strides)))
        if order is not None:
            st = tuple([st[k] for k in order])
        return Operand(self.buffer, self.dtype, self.offset, st)


class Scalar:
    """A Python scalar argument, converted to ``dtype`` as the unfused call converts it."""

    __slots__ = ("value", "dtype")

    def __init__(self, value: Any, dtype: np.dtype) -> None:
        self.value, self.dtype = value, dtype


class Node:
    """A pending element-wise result: the operation's tree (over its parameter names), its
    arguments (Node, Leaf or Scalar per parameter), the compute dtype each is converted to,
    the result dtype and shape. ``done`` is the Leaf of its memory once computed."""

    __slots__ = ("name", "tree", "params", "args", "casts", "dtype", "shape", "dev", "ops",
                 "keys", "inputs", "done", "error", "spec", "__weakref__")

    def __init__(self, name: str, tree: Tree, params: tuple[str, ...], args: tuple[Any, ...],
                 casts: tuple[np.dtype, ...], dtype: np.dtype, shape: tuple[int, ...],
                 dev: Any, spec: ElementwiseSpec | None = None) -> None:
        self.name, self.tree, self.params, self.args = name, tree, params, args
        self.casts, self.dtype, self.shape, self.dev = casts, dtype, shape, dev
        #: the operation's own description: a node whose arguments are all in memory is
        #: computed by its own kernel, as the unfused call would be
        self.spec = spec
        # an upper bound of the chain's size (shared subexpressions counted per use)
        ops = 1
        keys: set[tuple] = set()
        for a in args:
            t = type(a)
            if t is Node:
                ops += a.ops
                keys |= a.keys
            elif t is Leaf:
                keys.add(a.key())
        self.ops = ops
        #: the distinct arrays the chain reads (its leaves, held by the chain: ids are stable)
        self.keys = frozenset(keys)
        self.inputs = len(keys)
        self.done: Leaf | None = None
        #: why its kernel could not be sent (raised wherever its memory is needed)
        self.error: BaseException | None = None


# -- switches and counters ------------------------------------------------------------------------
def enabled() -> bool:
    """Whether element-wise calls are held back for fusion now: the innermost ``fusion(...)``
    block of this thread, else the ``array_fusion`` option (on by default)."""
    forced = _tls.forced
    if forced is not None:
        return forced
    option = _option
    if option[0] is not config():  # read once per configuration (an element-wise call's
        # cost is a few microseconds: the environment is not read at every one)
        option[1] = (setting("GPUMSG_ARRAY_FUSION") or "1").strip().lower() not in _OFF
        option[0] = config()
    return option[1]


#: [the configuration the option was read under, whether fusion is on]
_option: list[Any] = [None, True]


@contextlib.contextmanager
def fusion(enabled: bool = True) -> Iterator[None]:
    """Turn fusion on or off for this thread inside a ``with`` block (overriding the
    ``array_fusion`` option). Entering computes what is pending."""
    if not isinstance(enabled, bool):
        raise TypeError(f"fusion(enabled): a bool, got {enabled!r}")
    flush()
    before = _tls.forced
    _tls.forced = enabled
    try:
        yield
    finally:
        _tls.forced = before


def fusion_stats() -> dict[str, int]:
    """Counters since the process started: ``kernels`` (element-wise kernels generated from
    pending chains and launched), ``reductions`` (reductions that computed a pending chain in
    their own kernel) and ``operations`` (element-wise operations those kernels computed)."""
    with _lock:
        return dict(_stats)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Posts of this thread inside the block leave pending work pending: for code that only
    writes memory it has just allocated (a reduction reading a pending chain)."""
    before = _tls.quiet
    _tls.quiet = True
    try:
        yield
    finally:
        _tls.quiet = before


#: messages that write no memory a pending chain reads (a compiled module's loading, which
#: NVRTC's compiling thread posts; a new buffer's allocation): they leave pending work pending
_HARMLESS = (LoadModule, Alloc)


def _hook(msg: Any) -> None:
    """Run by the client before each post: compute what is pending first (errors stay with
    the arrays: they are raised where one is read)."""
    if (_live or _inflight) and not isinstance(msg, _HARMLESS) and \
            not _tls.quiet:
        flush(raise_errors=False)


# -- holding back ---------------------------------------------------------------------------------
def _item(a: Any) -> Any:
    """A pending argument's Node, or the Leaf of an array in memory."""
    node = a._node
    if node is not None and node.done is None:
        return node
    if node is not None:
        return node.done
    return Leaf(a._b, a._dtype, a._offset, a._strides, a._shape)


def defer(dev: Any, spec: ElementwiseSpec, shape: tuple[int, ...], args: list[Any],
          wrap: Callable[[Node], Any]) -> Any:
    """The pending result of ``spec`` (one output, one statement) over ``args`` (Arrays of
    ``dev`` and Python scalars, in the order of ``spec.ins``), made into an array by ``wrap``;
    None when fusion is off (or there is nothing to compute): the caller launches it itself."""
    if not enabled() or math.prod(shape) == 0:
        return None
    form = _FORMS.get(spec)
    if form is None:
        form = _form(spec)
    if not form:
        return None
    tree, params = form
    for attempt in (0, 1):
        with _lock:
            items = tuple([Scalar(a, dt) if sc else _item(a)
                           for (_, dt, sc), a in zip(spec.ins, args)])
            node = Node(spec.name, tree, params, items, spec.casts, spec.outs[0][1], shape,
                        dev, spec)
            if attempt or (node.ops <= MAX_OPS and node.inputs <= MAX_INPUTS):
                wrapper = wrap(node)
                if not _live:
                    set_before_post(_hook)
                seq = next(_seq)
                _live[seq] = weakref.KeyedRef(wrapper, _gone, seq)
                return wrapper
        flush()  # a long chain: compute what is pending, then start again from its results
    raise AssertionError("unreachable")


#: spec -> (its one statement's tree, its parameter names), or () where it cannot be held back
_FORMS: dict[ElementwiseSpec, tuple] = {}


def _form(spec: ElementwiseSpec) -> tuple:
    form: tuple = ()
    if len(spec.outs) == 1:
        prog = program(spec.text)
        if len(prog.statements) == 1 and prog.statements[0][0] == spec.outs[0][0]:
            form = (prog.statements[0][1], tuple(name for name, _, _ in spec.ins))
    if len(_FORMS) >= 4096:
        _FORMS.clear()
    _FORMS[spec] = form
    return form


# -- generating -----------------------------------------------------------------------------------
def _substitute(tree: Tree, names: dict[str, Tree]) -> Tree:
    kind = tree[0]
    if kind == "var":
        return names.get(tree[1], tree)
    if kind == "num":
        return tree
    if kind == "bin":
        return ("bin", tree[1], _substitute(tree[2], names), _substitute(tree[3], names))
    if kind == "un":
        return ("un", tree[1], _substitute(tree[2], names))
    if kind == "tern":
        return ("tern", *(_substitute(t, names) for t in tree[1:]))
    return ("call", tree[1], tuple(_substitute(t, names) for t in tree[2]))


#: rank -> the identity order of that many dimensions
_IDENTITY = {n: tuple(range(n)) for n in range(33)}


class _Builder:
    """The statements of the nodes reachable from some outputs: one ``t<k>`` per pending node
    (shared subexpressions once), one input ``a<k>`` per distinct leaf, one ``s<k>`` per
    scalar. The walk records the chain's structure (:meth:`structure_key`: operations,
    dtypes, which input or statement each argument is, nothing of the values), which keys the
    cache of generated descriptions; the text is rendered only for a structure not seen
    before."""

    def __init__(self) -> None:
        #: per statement: (tree, params, casts, dtype, ((kind, index), dtype) per argument)
        self.structure: list[tuple] = []
        self.leaves: dict[tuple, tuple[int, Leaf]] = {}
        self.scalars: list[Scalar] = []
        self.names: dict[int, int] = {}

    def var(self, item: Any) -> tuple[tuple[str, int], np.dtype]:
        if isinstance(item, Scalar):
            self.scalars.append(item)
            return ("s", len(self.scalars) - 1), item.dtype
        if isinstance(item, Node) and item.done is not None:
            item = item.done
        if isinstance(item, Leaf):
            key = item.key()
            found = self.leaves.get(key)
            if found is None:
                found = self.leaves[key] = (len(self.leaves), item)
            return ("a", found[0]), item.dtype
        k = self.names.get(id(item))
        if k is not None:
            return ("t", k), item.dtype
        refs = tuple([self.var(arg) for arg in item.args])
        k = self.names[id(item)] = len(self.structure)
        self.structure.append((item.tree, item.params, item.casts, item.dtype, refs))
        return ("t", k), item.dtype

    def structure_key(self, roots: tuple) -> tuple:
        return (tuple(self.structure), tuple(leaf.dtype for _, leaf in self.leaves.values()),
                tuple(s.dtype for s in self.scalars), roots)

    def statements(self) -> list[str]:
        """The statements' text (``t<k> = ...``), rendered from the structure."""
        out = []
        for k, (tree, params, casts, dtype, refs) in enumerate(self.structure):
            names: dict[str, Tree] = {}
            for param, ((kind, i), dt), cdt in zip(params, refs, casts):
                ref: Tree = ("var", f"{kind}{i}")
                names[param] = ref if dt == cdt else ("call", cast_name(cdt), (ref,))
            text = render_text(("call", cast_name(dtype), (_substitute(tree, names),)))
            out.append(f"t{k} = {text}")
        return out

    def ins(self) -> tuple[tuple[tuple[str, np.dtype, bool], ...], tuple[np.dtype, ...]]:
        ins = [(f"a{i}", leaf.dtype, False) for i, leaf in self.leaves.values()]
        ins += [(f"s{i}", s.dtype, True) for i, s in enumerate(self.scalars)]
        return tuple(ins), tuple(dt for _, dt, _ in ins)

    def values(self, shape: tuple[int, ...],
               order: tuple[int, ...] | None = None) -> list[Any]:
        if order is not None and order == _IDENTITY.get(len(order)):
            order = None
        out: list[Any] = [leaf.operand(shape, order) for _, leaf in self.leaves.values()]
        return out + [s.value for s in self.scalars]


#: chain structure (:meth:`_Builder.structure_key`) -> what was generated from it: the
#: ElementwiseSpec of a group's kernel, or a reduction's (statements, root, ins, casts)
_generated: dict[tuple, Any] = {}
_GENERATED_SIZE = 4096


def _generate(key: tuple, make: Callable[[], Any]) -> Any:
    found = _generated.get(key)
    if found is None:
        if len(_generated) >= _GENERATED_SIZE:
            _generated.clear()
        found = _generated[key] = make()
    return found


def flush(raise_errors: bool = True) -> None:
    """Compute every pending result still referenced (see the module docstring). A group
    whose kernel cannot be sent keeps its error: raised here (unless ``raise_errors`` is
    false) and again wherever one of its arrays' memory is needed."""
    global _inflight
    if _tls.flushing or (not _live and not _inflight):
        return
    failed: list[tuple[list[tuple[int, Any]], BaseException]] = []
    with _lock:  # another thread's flush in progress: wait for its kernels to be sent
        _tls.flushing = True
        _inflight += 1
        try:
            while _live:
                # a snapshot (one C call: a reference dying meanwhile leaves it alone), in
                # creation order
                refs = _live.copy()
                _live.clear()
                groups: dict[tuple, list[tuple[int, Any]]] = {}
                for seq, ref in refs.items():
                    w = ref()
                    node = w._node if w is not None else None
                    if node is not None and node.done is None:
                        key = (id(node.dev), node.shape)
                        found = groups.get(key)
                        if found is None:
                            groups[key] = [(seq, w)]
                        else:
                            found.append((seq, w))
                del refs
                # smaller shapes first: a result read broadcast by a larger one is in memory
                # before the larger one's kernel reads it
                ordered = groups.items() if len(groups) == 1 else sorted(
                    groups.items(), key=lambda kv: (math.prod(kv[0][1]), len(kv[0][1])))
                for _, ws in ordered:
                    for part in _batches(ws) if len(ws) > 1 else (ws,):
                        try:
                            _compute([w for _, w in part])
                        except Exception as exc:  # noqa: BLE001 - kept with its arrays
                            failed.append((part, exc))
                            for _, w in part:
                                w._node.error = exc
        finally:
            _tls.flushing = False
            _inflight -= 1
            set_before_post(_hook if _live else None)
    if failed and raise_errors:
        raise failed[0][1]


#: the most outputs and array inputs one kernel takes (its parameters stay far below CUDA's
#: 4 KiB); a group of more pending results of one shape is computed by several kernels
MAX_OUTPUTS = 16
MAX_KERNEL_INPUTS = 32


def _batches(ws: list[tuple[int, Any]]) -> list[list[tuple[int, Any]]]:
    """``ws`` (one shape's pending results, in creation order) cut into kernels of at most
    MAX_OUTPUTS outputs and MAX_KERNEL_INPUTS distinct array inputs."""
    out: list[list[tuple[int, Any]]] = []
    current: list[tuple[int, Any]] = []
    inputs: set[tuple] = set()
    for item in ws:
        mine = item[1]._node.keys
        if current and (len(current) == MAX_OUTPUTS or
                        len(inputs | mine) > MAX_KERNEL_INPUTS):
            out.append(current)
            current, inputs = [], set()
        current.append(item)
        inputs |= mine
    if current:
        out.append(current)
    return out


def _compute(wrappers: list[Any]) -> None:
    nodes = [w._node for w in wrappers]
    dev, shape = nodes[0].dev, nodes[0].shape
    if len(nodes) == 1 and nodes[0].ops == 1 and nodes[0].spec is not None:
        _compute_one(wrappers[0], nodes[0], dev, shape)
        return
    b = _Builder()
    outs = tuple(b.var(n)[0][1] for n in nodes)

    def make() -> ElementwiseSpec:
        ins, casts = b.ins()
        return ElementwiseSpec("fused", "; ".join(b.statements()), ins, casts,
                               tuple((f"t{k}", n.dtype) for k, n in zip(outs, nodes)))

    spec = _generate(("ew", b.structure_key(outs)), make)
    bufs = elementwise_new(dev, spec, shape, b.values(shape))
    _stats["kernels"] += 1
    _stats["operations"] += len(b.structure)
    strides = _c_strides(shape)
    for i, (w, n, buf) in enumerate(zip(wrappers, nodes, bufs)):
        w._b = buf
        w._node = None
        if i:  # allocated apart: its future answers once the launch writing it has
            w._wrote(bufs[0])
        n.done = Leaf(w._b, n.dtype, 0, strides, shape)
        n.args = ()  # its inputs are no longer needed by it


def _compute_one(w: Any, node: Node, dev: Any, shape: tuple[int, ...]) -> None:
    """One pending operation over arrays in memory and scalars (a chain of one, the most common
    flush): launched with its own description, as the unfused call launches it, without
    walking a chain or generating a description."""
    ins = [a.value if type(a) is Scalar else a.operand(shape) for a in node.args]
    (buf,) = elementwise_new(dev, node.spec, shape, ins)
    _stats["kernels"] += 1
    _stats["operations"] += 1
    w._b = buf
    w._node = None
    node.done = Leaf(buf, node.dtype, 0, _c_strides(shape), shape)
    node.args = ()


def chain_of(x: Any, order: tuple[int, ...]) -> Any:
    """For a reduction of ``x``: None when ``x`` is in memory (or fusion is off); else
    (statements, root variable, its dtype, inputs, casts, operand values, description) of the
    pending chain, the array operands' strides permuted by ``order``; ``description`` is the
    object generated for the chain's structure (the same object for every chain of that
    structure while it is kept, so a caller may key its own derived values by its identity,
    holding it). Counts the reduction."""
    # an array in memory never becomes pending again: no lock and no option to read for it
    if x._node is None or not enabled():
        return None
    with _lock:
        node = x._node
        if node is None or node.done is not None:
            return None
        b = _Builder()
        (_, root), dt = b.var(node)

        def make() -> tuple:
            ins, casts = b.ins()
            return "; ".join(b.statements()), f"t{root}", ins, casts

        made = _generate(("red", b.structure_key((root,))), make)
        statements, name, ins, casts = made
        _stats["reductions"] += 1
        _stats["operations"] += len(b.structure)
        return statements, name, dt, ins, casts, b.values(node.shape, order), made
