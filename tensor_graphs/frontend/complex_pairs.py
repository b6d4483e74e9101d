"""Complex values a model makes from real tensors and turns back into real ones, as pairs of reals.

A rotary embedding written with complex numbers (Llama's ``apply_rotary_emb``: ``view_as_complex``
of the queries, a product with a complex ``freqs_cis`` buffer, ``view_as_real`` back) computes
with complex values only in between. Before import, this pass rewrites the exported graph so that
each complex value is its ``view_as_real`` form, a real tensor with a trailing dim of 2 (real,
imaginary), and each op on complex values is the real ops on those pairs:

```text
xc = view_as_complex(x)                  xc  = x                                  (x: [..., d/2, 2])
f  = slice(freqs_cis, 0, 0, s)           f   = slice(view_as_real(freqs_cis), 0, 0, s)
y  = mul(xc, view(f, [1, s, 1, d/2]))    f'  = view(f, [1, s, 1, d/2, 2])
out = view_as_real(y)                    out = stack([xr*fr - xi*fi, xr*fi + xi*fr], -1)
```

FFTs (``_fft_r2c``, ``_fft_c2c``, ``_fft_c2r``) on pairs are products with cos/sin tables (a DFT, O(n^2)
per transformed dim: for the short signals models transform, not an FFT). A complex buffer,
parameter or constant becomes its real pairs (``torch.view_as_real``). Ops on
complex values outside :data:`RULES` stay as they are, and the importer refuses them by name with
the complex dtype, as it does complex model inputs and outputs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node

aten = torch.ops.aten


def _is_complex(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.is_complex()


def has_complex_values(ep: ExportedProgram) -> bool:
    return any(_is_complex(n.meta.get("val")) for n in ep.graph.nodes)


class _Rewriter:
    """Rewrites one graph: ``pairs`` maps each complex node to the node holding its pairs."""

    def __init__(self, graph: torch.fx.Graph):
        self.graph = graph
        self.pairs: dict[Node, Node] = {}
        self.renamed: dict[str, Node] = {}  # a real result computed anew: the old node's name -> the new node
        self._at: Node | None = None

    def emit(self, target: Any, *args: Any, **kwargs: Any) -> Node:
        """``target(*args, **kwargs)`` before the node being rewritten, with its example value."""
        assert self._at is not None
        with self.graph.inserting_before(self._at):
            node = self.graph.call_function(target, args, kwargs)
        vals = [a.meta["val"] if isinstance(a, Node) else [x.meta["val"] if isinstance(x, Node) else x for x in a]
                if isinstance(a, list) else a for a in args]
        node.meta["val"] = target(*vals, **kwargs)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in self._at.meta:
                node.meta[key] = self._at.meta[key]
        return node

    def parts(self, pair: Node) -> tuple[Node, Node]:
        return self.emit(aten.select.int, pair, -1, 0), self.emit(aten.select.int, pair, -1, 1)

    def join(self, re: Node, im: Node) -> Node:
        return self.emit(aten.stack.default, [re, im], -1)

    def rewrite(self, node: Node) -> None:
        if node.op != "call_function":
            return
        rule = RULES.get(node.target)
        complex_in = [a for a in node.all_input_nodes if a in self.pairs]
        if rule is None or not (complex_in or _is_complex(node.meta.get("val"))):
            return
        self._at = node
        try:
            result = rule(self, node, *node.args, **node.kwargs)
        except Exception:  # noqa: BLE001 - a case the rule does not cover: left complex, refused by name
            return
        if result is None:
            return
        if _is_complex(node.meta.get("val")):
            self.pairs[node] = result
        else:
            node.replace_all_uses_with(result)
            self.renamed[node.name] = result


def _pair_dim(d: int) -> int:
    """A dim of a complex tensor of ``rank`` as a dim of its pairs (one more, trailing)."""
    return d if d >= 0 else d - 1


def _view_as_complex(r: _Rewriter, node: Node, x: Node) -> Node:
    return x


def _view_as_real(r: _Rewriter, node: Node, c: Node) -> Node | None:
    return r.pairs.get(c)


def _as_pairs(r: _Rewriter, value: Any) -> Node | None:
    """A complex operand's pairs; a real tensor or number: None (it scales both parts)."""
    return r.pairs.get(value) if isinstance(value, Node) else None


def _mul(r: _Rewriter, node: Node, a: Any, b: Any) -> Node | None:
    pa, pb = _as_pairs(r, a), _as_pairs(r, b)
    if pa is not None and pb is not None:
        (ar, ai), (br, bi) = r.parts(pa), r.parts(pb)
        re = r.emit(aten.sub.Tensor, r.emit(aten.mul.Tensor, ar, br), r.emit(aten.mul.Tensor, ai, bi))
        im = r.emit(aten.add.Tensor, r.emit(aten.mul.Tensor, ar, bi), r.emit(aten.mul.Tensor, ai, br))
        return r.join(re, im)
    pair, other = (pa, b) if pa is not None else (pb, a)
    if pair is None:
        return None
    if isinstance(other, Node):
        if _is_complex(other.meta.get("val")):
            return None
        other = r.emit(aten.unsqueeze.default, other, -1)
    return r.emit(aten.mul.Tensor, pair, other)


def _add_sub(target: Any) -> Callable[..., Node | None]:
    def rule(r: _Rewriter, node: Node, a: Any, b: Any, alpha: Any = 1) -> Node | None:
        pa, pb = _as_pairs(r, a), _as_pairs(r, b)
        if pa is None or pb is None:
            return None
        return r.emit(target, pa, pb) if alpha == 1 else r.emit(target, pa, r.emit(aten.mul.Tensor, pb, alpha))

    return rule


def _polar(r: _Rewriter, node: Node, magnitude: Node, angle: Node) -> Node:
    return r.join(r.emit(aten.mul.Tensor, magnitude, r.emit(aten.cos.default, angle)),
                  r.emit(aten.mul.Tensor, magnitude, r.emit(aten.sin.default, angle)))


def _complex(r: _Rewriter, node: Node, re: Node, im: Node) -> Node:
    shape = list(node.meta["val"].shape)  # the parts broadcast together
    re, im = (p if list(p.meta["val"].shape) == shape else r.emit(aten.expand.default, p, shape) for p in (re, im))
    return r.join(re, im)


def _part(index: int) -> Callable[..., Node | None]:
    def rule(r: _Rewriter, node: Node, c: Node) -> Node | None:
        pair = r.pairs.get(c)
        return None if pair is None else r.emit(aten.select.int, pair, -1, index)

    return rule


def _conj(r: _Rewriter, node: Node, c: Node) -> Node | None:
    pair = r.pairs.get(c)
    if pair is None:
        return None
    re, im = r.parts(pair)
    return r.join(re, r.emit(aten.neg.default, im))


def _abs(r: _Rewriter, node: Node, c: Node) -> Node | None:
    pair = r.pairs.get(c)
    if pair is None:
        return None
    return r.emit(aten.linalg_vector_norm.default, pair, 2, [-1])


def _same(target: Any) -> Callable[..., Node | None]:
    """An op that moves a complex tensor's elements: the same op on the pairs (no dim args)."""
    def rule(r: _Rewriter, node: Node, c: Node, *rest: Any) -> Node | None:
        pair = r.pairs.get(c)
        return None if pair is None else r.emit(target, pair, *rest)

    return rule


def _with_dim(target: Any) -> Callable[..., Node | None]:
    """A view along one dim (its first argument after the tensor): the dim of the pairs."""
    def rule(r: _Rewriter, node: Node, c: Node, dim: int = 0, *rest: Any) -> Node | None:
        pair = r.pairs.get(c)
        return None if pair is None else r.emit(target, pair, _pair_dim(dim), *rest)

    return rule


def _with_shape(target: Any) -> Callable[..., Node | None]:
    """``view``/``reshape``/``expand`` to ``shape``: to ``shape + [2]``."""
    def rule(r: _Rewriter, node: Node, c: Node, shape: list[int], *rest: Any) -> Node | None:
        pair = r.pairs.get(c)
        return None if pair is None else r.emit(target, pair, [*shape, 2], *rest)

    return rule


def _permute(r: _Rewriter, node: Node, c: Node, dims: list[int]) -> Node | None:
    pair = r.pairs.get(c)
    rank = c.meta["val"].dim()
    return None if pair is None else r.emit(aten.permute.default, pair, [d % rank for d in dims] + [rank])


def _transpose(r: _Rewriter, node: Node, c: Node, d0: int, d1: int) -> Node | None:
    pair = r.pairs.get(c)
    rank = c.meta["val"].dim()
    return None if pair is None else r.emit(aten.transpose.int, pair, d0 % rank, d1 % rank)


def _flatten(r: _Rewriter, node: Node, c: Node, start: int = 0, end: int = -1) -> Node | None:
    pair = r.pairs.get(c)
    rank = c.meta["val"].dim()
    return None if pair is None else r.emit(aten.flatten.using_ints, pair, start % max(rank, 1), end % max(rank, 1))


def _to_copy(r: _Rewriter, node: Node, x: Node, **kwargs: Any) -> Node | None:
    """A real tensor made complex: its pairs with zero imaginary parts; a complex one to another
    precision: the pairs converted; to a real dtype: the real part (as torch, which warns)."""
    out = node.meta["val"]
    real = out.real.dtype if out.is_complex() else out.dtype
    pair = r.pairs.get(x)
    if pair is None:
        if _is_complex(x.meta.get("val")) or not out.is_complex():
            return None
        re = r.emit(aten._to_copy.default, x, dtype=real)
        return r.join(re, r.emit(aten.zeros_like.default, re))
    converted = r.emit(aten._to_copy.default, pair, dtype=real)
    return converted if out.is_complex() else r.emit(aten.select.int, converted, -1, 0)


def _pad(r: _Rewriter, node: Node, c: Node, pad: list[int], value: float = 0.0) -> Node | None:
    """``constant_pad_nd`` of a complex tensor (a real padding value): the pairs padded, their
    trailing dim not."""
    pair = r.pairs.get(c)
    if pair is None or not isinstance(value, (int, float)) or value != 0:
        return None
    return r.emit(aten.constant_pad_nd.default, pair, [0, 0, *pad], 0.0)


def _dft_tables(r: _Rewriter, n_in: int, n_out: int, period: int, dtype: torch.dtype) -> tuple[Node, Node]:
    """``cos`` and ``sin`` of ``2 pi j k / period`` for ``j < n_in``, ``k < n_out`` (``j k`` reduced
    mod ``period`` in integers, the angle in float64, then ``dtype``): constants once folded."""
    j = r.emit(aten.unsqueeze.default, r.emit(aten.arange.default, n_in), -1)
    k = r.emit(aten.arange.default, n_out)
    phase = r.emit(aten.remainder.Scalar, r.emit(aten.mul.Tensor, j, k), period)
    angle = r.emit(aten.mul.Tensor, r.emit(aten._to_copy.default, phase, dtype=torch.float64), 2 * math.pi / period)
    return tuple(r.emit(aten._to_copy.default, r.emit(f, angle), dtype=dtype) for f in (aten.cos.default, aten.sin.default))


def _dft(r: _Rewriter, re: Node, im: Node | None, dim: int, sign: int, n_out: int | None = None,
         period: int | None = None) -> tuple[Node, Node]:
    """The first ``n_out`` terms (all ``n``) of the DFT along ``dim`` of ``re + i im`` with
    ``exp(sign 2 pi i j k / period)`` (``period`` ``n``): two products with the cos and sin tables
    each (``im`` None: a real input)."""
    rank = re.meta["val"].dim()
    n = re.meta["val"].shape[dim]
    cos, sin = _dft_tables(r, n, n if n_out is None else n_out, n if period is None else period, re.meta["val"].dtype)
    order = [d for d in range(rank) if d != dim % rank] + [dim % rank]  # dim last, and back
    move = lambda t: r.emit(aten.permute.default, t, order)  # noqa: E731
    back = lambda t: r.emit(aten.permute.default, t, [order.index(d) for d in range(rank)])  # noqa: E731
    xr = move(re)
    rc, rs = r.emit(aten.matmul.default, xr, cos), r.emit(aten.matmul.default, xr, sin)
    if im is None:
        return back(rc), back(rs if sign > 0 else r.emit(aten.neg.default, rs))
    xi = move(im)
    ic, is_ = r.emit(aten.matmul.default, xi, cos), r.emit(aten.matmul.default, xi, sin)
    if sign < 0:
        return back(r.emit(aten.add.Tensor, rc, is_)), back(r.emit(aten.sub.Tensor, ic, rs))
    return back(r.emit(aten.sub.Tensor, rc, is_)), back(r.emit(aten.add.Tensor, ic, rs))


def _normalized(r: _Rewriter, parts: list[Node], normalization: int, count: int) -> list[Node]:
    """torch's fft_norm_mode: 0 none, 1 by sqrt(n), 2 by n (n: the signal's element count)."""
    scale = {0: 1.0, 1: 1.0 / math.sqrt(count), 2: 1.0 / count}[normalization]
    return parts if scale == 1.0 else [r.emit(aten.mul.Tensor, p, scale) for p in parts]


def _fft_c2c(r: _Rewriter, node: Node, c: Node, dim: list[int], normalization: int, forward: bool) -> Node | None:
    """``_fft_c2c``: a DFT (``exp(-2 pi i jk/n)`` forward, ``+`` backward) along each dim."""
    pair = r.pairs.get(c)
    if pair is None:
        return None
    re, im = r.parts(pair)
    for d in dim:
        re, im = _dft(r, re, im, d, -1 if forward else 1)
    shape = c.meta["val"].shape
    return r.join(*_normalized(r, [re, im], normalization, math.prod(shape[d] for d in dim)))


def _fft_r2c(r: _Rewriter, node: Node, x: Node, dim: list[int], normalization: int, onesided: bool) -> Node | None:
    """``_fft_r2c``: the forward DFT of a real tensor along each dim, the last one's first
    ``n // 2 + 1`` frequencies when ``onesided``."""
    shape = x.meta["val"].shape
    last = dim[-1]
    re, im = _dft(r, x, None, last, -1, (shape[last] // 2 + 1) if onesided else None, shape[last])
    for d in dim[:-1]:
        re, im = _dft(r, re, im, d, -1)
    return r.join(*_normalized(r, [re, im], normalization, math.prod(shape[d] for d in dim)))


def _fft_c2r(r: _Rewriter, node: Node, c: Node, dim: list[int], normalization: int, last_dim_size: int) -> Node | None:
    """``_fft_c2r``: backward DFTs along all but the last dim, then the real signal of
    ``last_dim_size`` from the onesided spectrum along it: ``sum_k w_k (Re X_k cos - Im X_k sin)``,
    ``w_k`` 2 but for ``k = 0`` (and ``n/2``); the imaginary parts there ignored, as pocketfft."""
    pair = r.pairs.get(c)
    if pair is None:
        return None
    re, im = r.parts(pair)
    for d in dim[:-1]:
        re, im = _dft(r, re, im, d, 1)
    last, n = dim[-1], last_dim_size
    half = n // 2 + 1
    rank = re.meta["val"].dim()
    if re.meta["val"].shape[last] != half:
        re, im = (r.emit(aten.slice.Tensor, t, last % rank, 0, half) for t in (re, im))
    w = r.emit(aten.mul.Tensor, r.emit(aten.ones.default, [half], dtype=re.meta["val"].dtype), 2.0)
    for once in (0, half - 1) if n % 2 == 0 and half > 1 else (0,):  # the frequencies counted once
        hit = r.emit(aten.eq.Scalar, r.emit(aten.arange.default, half), once)
        w = r.emit(aten.sub.Tensor, w, r.emit(aten._to_copy.default, hit, dtype=re.meta["val"].dtype))
    shape = [1] * rank
    shape[last % rank] = half
    w = r.emit(aten.view.default, w, shape)
    re, im = r.emit(aten.mul.Tensor, re, w), r.emit(aten.mul.Tensor, im, w)
    cos_part, _ = _dft(r, re, None, last, 1, n, n)
    _, sin_part = _dft(r, im, None, last, 1, n, n)
    out = r.emit(aten.sub.Tensor, cos_part, sin_part)
    out_shape = list(node.meta["val"].shape)
    return _normalized(r, [out], normalization, math.prod(out_shape[d] for d in dim))[0]


#: aten op on complex values -> its rule on pairs (None: left as it is, refused by the importer)
RULES: dict[Any, Callable[..., Node | None]] = {
    aten.view_as_complex.default: _view_as_complex,
    aten.view_as_real.default: _view_as_real,
    aten.mul.Tensor: _mul,
    aten.add.Tensor: _add_sub(aten.add.Tensor),
    aten.sub.Tensor: _add_sub(aten.sub.Tensor),
    aten.polar.default: _polar,
    aten.complex.default: _complex,
    aten.real.default: _part(0),
    aten.imag.default: _part(1),
    aten.conj_physical.default: _conj,
    aten._conj.default: _conj,
    aten.abs.default: _abs,
    aten.clone.default: _same(aten.clone.default),
    aten.alias.default: _same(aten.alias.default),
    aten.slice.Tensor: _with_dim(aten.slice.Tensor),
    aten.select.int: _with_dim(aten.select.int),
    aten.unsqueeze.default: _with_dim(aten.unsqueeze.default),
    aten.squeeze.dim: _with_dim(aten.squeeze.dim),
    aten.view.default: _with_shape(aten.view.default),
    aten._unsafe_view.default: _with_shape(aten._unsafe_view.default),
    aten.reshape.default: _with_shape(aten.reshape.default),
    aten.expand.default: _with_shape(aten.expand.default),
    aten.permute.default: _permute,
    aten.transpose.int: _transpose,
    aten.flatten.using_ints: _flatten,
    aten._to_copy.default: _to_copy,
    aten.constant_pad_nd.default: _pad,
    aten._fft_c2c.default: _fft_c2c,
    aten._fft_r2c.default: _fft_r2c,
    aten._fft_c2r.default: _fft_c2r,
}


def split_complex(ep: ExportedProgram) -> ExportedProgram:
    """``ep`` with its complex values as pairs of reals (module doc); ``ep`` itself when it has
    none. The caller's program is not changed: the rewrite is of a copy."""
    if not has_complex_values(ep):
        return ep
    gm = copy.deepcopy(ep.graph_module)
    state, constants = dict(ep.state_dict), dict(ep.constants)
    targets = {spec.arg.name: spec.target for spec in ep.graph_signature.input_specs if hasattr(spec.arg, "name")}
    rewriter = _Rewriter(gm.graph)
    for node in list(gm.graph.nodes):
        if node.op == "placeholder" and _is_complex(node.meta.get("val")) and targets.get(node.name) is not None:
            name = targets[node.name]
            table = state if name in state else constants if name in constants else None
            if table is not None:
                table[name] = torch.view_as_real(table[name]).clone()
                node.meta["val"] = torch.view_as_real(node.meta["val"])
                rewriter.pairs[node] = node
        else:
            rewriter.rewrite(node)
    for node in reversed(list(gm.graph.nodes)):
        checks_a_pair = node.target is aten._assert_tensor_metadata.default and node.args[0] in rewriter.pairs
        if node.op == "call_function" and not node.users and (node.target in RULES or checks_a_pair):
            gm.graph.erase_node(node)  # the complex ops now computed on pairs, and the checks of their dtype
    gm.recompile()
    signature = copy.deepcopy(ep.graph_signature)
    for spec in signature.output_specs:  # an output now computed by another node: its name
        while hasattr(spec.arg, "name") and spec.arg.name in rewriter.renamed:
            spec.arg.name = rewriter.renamed[spec.arg.name].name
    return ep._update(gm, signature, state_dict=state, constants=constants)
