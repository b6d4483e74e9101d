"""The `buf` dialect: memref-level kernels over one planned arena.

Every intermediate value is a view into ONE arena at a static byte offset chosen by
`plan-memory`; weights and constants live outside it; each kernel is one op with explicit
input and output buffers (destination passing). Nothing allocates at run time.

```mlir
func.func @forward(%x: memref<1x256xf32>, %out: memref<1x1024xf32>) attributes {tg.num_outputs = 1 : i64} {
  %arena = buf.arena : memref<4096xi8>
  %w = buf.weight "fc1.weight" : memref<1024x256xf32>
  %t = buf.view %arena[0] : memref<4096xi8> -> memref<1x1024xf32>
  buf.matmul ins(%x, %w : memref<1x256xf32>, memref<1024x256xf32>) outs(%t : memref<1x1024xf32>) {transpose_b = true}
  buf.relu ins(%t : memref<1x1024xf32>) outs(%out : memref<1x1024xf32>)
  func.return
}
```

Before `plan-memory`, buffers are `buf.alloc` (no offset yet); after it, `buf.view`s of the arena.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    TensorType,
    bf16,
    f32,
    f64,
    i8,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.irdl import (
    AttrSizedOperandSegments,
    AttrSizedRegionSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    opt_region_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import IsTerminator, NoTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from tensor_graphs.dialects.shapes import (
    ShapeError,
    broadcast_shapes,
    is_broadcastable_to,
    matmul_shape,
    numel,
    permute_shape,
    window_positions,
)
from tensor_graphs.dialects.functions import ACTIVATIONS, BINARY_FUNCTIONS, UNARY_FUNCTIONS
from tensor_graphs.dialects.tensor import (
    AttentionLayout,
    attention_shapes,
    bool_attr,
    check_head_ranges,
    float_attr,
    lapack_params,
    print_dense,
    reduced_shape,
)
from tensor_graphs.dialects.symbolic import Dim, SymbolicShapeError, at_most, dims_of, divides, evaluate, format_expr, simplify, symbols_of
from tensor_graphs.dialects.packing import INT8K_SCALE_ROWS
from tensor_graphs.target import MIN_FLOAT_LANES

AnyMemRef = base(MemRefType)

#: Byte alignment of every arena view (one cache line, also enough for AVX-512 loads).
ALIGNMENT = 64

#: Sizes and offsets are int64 in the planner and the generated code: a buffer, or a function's
#: buffers together, of this many bytes or more (far beyond any machine's memory: a wrong shape)
#: cannot be planned or lowered.
MAX_BUFFER_BYTES = 1 << 62


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise VerifyException(message)


def shape_of(value: SSAValue) -> tuple[Dim, ...]:
    """The shape of a memref value: ints, and an expression of the symbols for each ``?``."""
    return dims_of(value.type)


def nbytes(type: MemRefType | TensorType, values: Mapping[str, int] | None = None) -> int:
    """Size in bytes of a memref or tensor; one with symbolic dims (`dialects.symbolic`) at the
    symbols' ``values`` (name -> size), which it then needs."""
    width = type.element_type.bitwidth  # type: ignore[attr-defined]
    shape = type.get_shape()
    if DYNAMIC_INDEX in shape:
        if values is None:
            raise SymbolicShapeError(f"{type} has symbolic sizes: its bytes depend on the symbols' values")
        shape = evaluate(dims_of(type), values)
    return numel(shape) * max(width // 8, 1)


def max_nbytes(type: MemRefType | TensorType, op: Operation) -> int:
    """`nbytes` at the largest size in range (the symbols' ranges recorded on ``op``'s module):
    what plan-memory reserves for a buffer of ``type``."""
    if DYNAMIC_INDEX not in type.get_shape():
        return nbytes(type)
    return nbytes(type, largest(op))


def max_shape(type: MemRefType | TensorType, op: Operation) -> tuple[int, ...]:
    """The shape of ``type`` at the top of each symbol's range (recorded on ``op``'s module)."""
    return evaluate(dims_of(type), largest(op))


def largest(op: Operation) -> dict[str, int]:
    """Every symbol recorded on ``op``'s module at the top of its range."""
    return {name: hi for name, (lo, hi) in symbols_of(op).items()}


# --------------------------------------------------------------------------- buffers


@irdl_op_definition
class ArenaOp(IRDLOperation):
    """The one arena of a graph; its static size is the memref's length in bytes."""

    name = "buf.arena"
    result = result_def(MemRefType.constr(i8))
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, size: int):
        super().__init__(result_types=[MemRefType(i8, [size])])

    @property
    def size(self) -> int:
        return self.result.type.get_shape()[0]

    def verify_(self) -> None:
        verify_arena_lifetimes(self)


@irdl_op_definition
class AllocOp(IRDLOperation):
    """A buffer not yet placed; `plan-memory` turns each into a `buf.view` of the arena."""

    name = "buf.alloc"
    result = result_def(AnyMemRef)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, type: MemRefType):
        super().__init__(result_types=[type])


@irdl_op_definition
class ViewOp(IRDLOperation):
    """A typed view of the arena starting at byte ``offset`` (64-byte aligned)."""

    name = "buf.view"
    arena = operand_def(MemRefType.constr(i8))
    offset = prop_def(IntegerAttr[i64])
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$arena `[` $offset `]` attr-dict `:` type($arena) `->` type($result)"

    def __init__(self, arena: SSAValue, offset: int, type: MemRefType):
        super().__init__(
            operands=[arena], properties={"offset": IntegerAttr(offset, i64)}, result_types=[type]
        )

    def verify_(self) -> None:
        off = self.offset.value.data
        size = shape_of(self.arena)[0]
        end = off + max_nbytes(self.result.type, self)
        _check(off >= 0 and off % ALIGNMENT == 0, f"buf.view: offset {off} is not a non-negative multiple of {ALIGNMENT}")
        _check(end <= size, f"buf.view: bytes [{off}, {end}) overflow the arena of {size} bytes")


@irdl_op_definition
class WeightOp(IRDLOperation):
    """A named parameter from the weight store, bound once when the graph is loaded."""

    name = "buf.weight"
    weight_name = prop_def(StringAttr, prop_name="name")
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, type: MemRefType):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[type])

    @property
    def slot_name(self) -> str:
        """Its name in the graph's weight table: the weight's own."""
        return self.weight_name.data


#: The memref element type of packed panels by their NumPy dtype (`packing.FORMATS`): int8 and
#: uint8 (int4 codes, zero points) as i8, uint16 (bf16 bits) as bf16, float32 (scales) as f32.
PANEL_ELEMENTS = {"int8": "i8", "uint8": "i8", "uint16": "bf16", "float32": "f32"}
#: The layout of a weight as the bf16 rows of a GEMM's lhs (`packing.Bf16RowsLayout`)
BF16_ROWS = "bf16rows"
#: Elements of a panel row per column, by format (`packing.FORMATS`; 1 when not named): bf16 pairs
#: along K, int4 codes in dot-product order (4 bytes per column), int8 quads along K
PER_COLUMN = {"bf16k": 2, "int4dot": 4, "int8k": 4}


@irdl_op_definition
class PackedWeightOp(IRDLOperation):
    """A weight packed into column panels for `buf.packed_matmul`, bound like a weight.

    ``memref<P x K x NR x f32>``: panel ``p`` holds the columns ``[p * NR, (p + 1) * NR)`` of the
    GEMM's ``B[K, N]`` as a row-major ``K x NR`` block, zero-padded past ``N``. The weight ``name``
    is stored ``[N, K]`` when ``transposed`` (``nn.Linear``), else ``[K, N]``: ``source_shape``
    says which shape it has, and the packed type must be what packing that shape gives
    (`layout`'s ``shape``). The runtime packs it once when the graph is loaded
    (`dialects.packing.PanelLayout`), from a weight that must have exactly ``source_shape``. A
    stack of G weights (experts, for `buf.packed_grouped_matmul`) packs each:
    ``memref<G x P x K x NR x f32>``.

    ```mlir
    %wp = buf.packed_weight "fc.weight" {transposed = true, source_shape = array<i64: 100, 32>} : memref<7x32x16xf32>
    ```
    """

    name = "buf.packed_weight"
    weight_name = prop_def(StringAttr, prop_name="name")
    transposed = prop_def(BoolAttr, default_value=bool_attr(False))
    #: "panels" (the layout above), or "winograd<m>": a 3x3 convolution's weight [Cout, C, 3, 3]
    #: transformed for F(m x m, 3 x 3), ``memref<(m+2)^2 x Cout x C x f32>``
    #: (`dialects.winograd.WinogradLayout`), the A of `buf.packed_matmul`'s batch of GEMMs; or
    #: the panels in a cheaper format for `buf.quantized_matvec` (`dialects.packing.FORMATS`):
    #: "bf16panels" ``memref<P x K x NR x bf16>``, "int8panels" ``memref<P x K x NR x i8>`` and
    #: its "int8scalespanels" ``memref<P x NR x f32>``, "bf16kpanels" ``memref<P x ceil(K/2) x 2NR x bf16>``,
    #: "int8kpanels" ``memref<P x ceil(K/4)+2 x 4NR x i8>`` (int8 quads along K, then the columns' scales);
    #: "bf16rows": a weight ``[M, ...]`` as the bf16 lhs ``memref<M x 2ceil(K/2) x bf16>`` of a GEMM
    #: (`packing.Bf16RowsLayout`: a convolution's weight in its bf16 GEMM);
    #: int4 (`packing.Int4Scheme`): "int4g32panels" ``memref<P x K x NR/2 x i8>`` (two codes a byte),
    #: "int4g32scalespanels" ``memref<P x ceil(K/32) x NR x bf16>`` (and "int4zg32zerospanels", i8).
    layout = prop_def(StringAttr, default_value=StringAttr("panels"))
    #: the shape of the weight ``name`` that is packed (as the weights file holds it)
    source_shape = prop_def(DenseArrayBase.constr(i64))
    result = result_def(MemRefType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, transposed: bool, type: MemRefType, source_shape: Sequence[int], layout: str = "panels"):
        props: dict[str, Attribute] = {"name": StringAttr(name), "transposed": bool_attr(transposed)}
        if layout != "panels":
            props["layout"] = StringAttr(layout)
        props["source_shape"] = DenseArrayBase.from_list(i64, [int(d) for d in source_shape])
        super().__init__(properties=props, result_types=[type])

    @property
    def winograd_tile(self) -> int:
        """``m`` of a "winograd<m>" layout, 0 for panels."""
        tail = self.layout.data.removeprefix("winograd")
        return int(tail) if tail.isdigit() and self.layout.data.startswith("winograd") else 0

    @property
    def format(self) -> str:
        """The panels' element format (`dialects.packing.FORMATS`), "" for a Winograd layout."""
        fmt, sep, rest = self.layout.data.partition("panels")
        return (fmt or "f32") if sep and not rest else ""

    @property
    def source(self) -> tuple[int, ...]:
        """``source_shape``: the shape of the weight that is packed."""
        return tuple(self.source_shape.get_values())

    @property
    def packing(self):
        """How the weight is packed: a `dialects.packing.PanelLayout` (its panel width from the
        result type), a `dialects.winograd.WinogradLayout` or a `dialects.packing.Bf16RowsLayout`."""
        from tensor_graphs.dialects.packing import Bf16RowsLayout, PanelLayout
        from tensor_graphs.dialects.winograd import WinogradLayout

        if self.winograd_tile:
            return WinogradLayout(self.weight_name.data, self.winograd_tile)
        if self.layout.data == BF16_ROWS:
            return Bf16RowsLayout(self.weight_name.data)
        from tensor_graphs.dialects.packing import Int4Scheme

        nr = shape_of(self.result)[-1]
        nr //= PER_COLUMN.get(self.format, 1)  # K pairs (two halves per column), K quads (four bytes)
        if (int4 := Int4Scheme.of(self.format)) is not None and not int4[1]:  # two columns per byte
            nr *= 2
        return PanelLayout(self.weight_name.data, nr, bool(self.transposed.value.data), self.format or "f32")

    @property
    def slot_name(self) -> str:
        """Its name in the graph's weight table: the weight's and the layout's
        (``"fc.weight@panels64t"``, see `dialects.packing.PanelLayout`)."""
        return self.packing.slot_name

    def verify_(self) -> None:
        self._verify_layout()
        self._verify_source()

    def _verify_layout(self) -> None:
        shape = shape_of(self.result)
        element = self.result.type.element_type
        fmt = self.format
        if fmt not in ("", "f32"):
            from tensor_graphs.dialects.packing import FORMATS

            expected = PANEL_ELEMENTS.get(str(FORMATS.get(fmt)))
            _check(fmt in FORMATS and str(element) == expected,
                   f"buf.packed_weight: {self.layout.data} holds {expected or 'nothing known'}, got {self.result.type}")
            rank = 2 if fmt == "int8scales" else 3
            _check(len(shape) == rank and shape[-1] > 0 and shape[-1] % MIN_FLOAT_LANES == 0,
                   f"buf.packed_weight: expected a rank-{rank} {self.layout.data} weight of whole vectors, got {self.result.type}")
            return
        if self.layout.data == BF16_ROWS:  # its shape: `_verify_source`
            _check(isinstance(element, BFloat16Type) and len(shape) == 2,
                   f"buf.packed_weight: {BF16_ROWS} is memref<M x K x bf16>, got {self.result.type}")
            return
        _check(element == f32, f"buf.packed_weight: {self.layout.data} holds f32, got {self.result.type}")
        if self.layout.data != "panels":
            from tensor_graphs.dialects.winograd import TILES

            m = self.winograd_tile
            _check(m in TILES, f"buf.packed_weight: unknown layout '{self.layout.data}' (panels, or winograd<m> for m in {sorted(TILES)})")
            a = m + 2
            _check(len(shape) == 3 and shape[0] == a * a,
                   f"buf.packed_weight: a {self.layout.data} weight is memref<{a * a} x Cout x C x f32>, got {self.result.type}")
            return
        _check(len(shape) in (3, 4),
               f"buf.packed_weight: expected memref<panels x K x NR x f32>, got {self.result.type} (or memref<G x panels x K x NR x f32>: a stack)")
        lanes = MIN_FLOAT_LANES  # whole vectors of the target's width: codegen checks that target's lanes
        _check(shape[-1] > 0 and shape[-1] % lanes == 0, f"buf.packed_weight: panel width {shape[-1]} is not a positive multiple of {lanes}")

    def _verify_source(self) -> None:
        """The packed type is what packing a weight of ``source_shape`` gives."""
        source, shape = self.source, shape_of(self.result)
        needs = self.packing.packs(source)
        _check(needs is None and min(source, default=0) > 0,
               f"buf.packed_weight: {self.layout.data} packs {needs or 'a weight of positive sizes'}, got source_shape {list(source)}")
        expected = tuple(self.packing.shape(source))
        _check(expected == shape,
               f"buf.packed_weight: packing '{self.weight_name.data}' of shape {list(source)} as {self.layout.data} gives "
               f"{list(expected)}, not the declared {list(shape)}")


@irdl_op_definition
class StateOp(IRDLOperation):
    """A persistent mutable buffer (a KV cache) outside the arena, bound once like a weight and
    kept between calls; `buf.cache_write` updates it in place."""

    name = "buf.state"
    state_name = prop_def(StringAttr, prop_name="name")
    result = result_def(AnyMemRef)
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, type: MemRefType):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[type])


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A constant buffer, bound like a weight but defined in the IR."""

    name = "buf.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())

    def __init__(self, value: DenseIntOrFPElementsAttr):
        vt = value.type
        super().__init__(
            properties={"value": value},
            result_types=[MemRefType(vt.element_type, vt.get_shape())],
        )

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error(f"buf.constant expects a dense<...> value, got {value}")
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        result_type = parser.parse_type()
        return cls.create(properties={"value": value}, attributes=attrs, result_types=[result_type])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_dense(printer, self.value)  # exact for -inf/NaN (see tensor.print_dense)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        vt = self.value.type
        _check(
            tuple(vt.get_shape()) == shape_of(self.result) and vt.element_type == self.result.type.element_type,
            "buf.constant: value and result must have the same shape and element type",
        )


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """The same bytes seen with another shape: an alias, never a copy."""

    name = "buf.reshape"
    input = operand_def(AnyMemRef)
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, type: MemRefType):
        super().__init__(operands=[input], result_types=[type])

    def verify_(self) -> None:
        a, b = shape_of(self.input), shape_of(self.result)
        _check(numel(a) == numel(b), f"buf.reshape: {list(a)} and {list(b)} hold different element counts")
        _check(self.input.type.element_type == self.result.type.element_type, "buf.reshape: element type must not change")


@irdl_op_definition
class SubviewOp(IRDLOperation):
    """A contiguous piece of a buffer: ``numel(result)`` elements from element ``offset`` on.

    Zero-copy (an alias, like `buf.reshape`); contiguous slices, splits and selects become this.
    """

    name = "buf.subview"
    input = operand_def(AnyMemRef)
    offset = prop_def(IntegerAttr[i64])
    result = result_def(AnyMemRef)
    traits = traits_def(Pure())
    assembly_format = "$input `[` $offset `]` attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, offset: int, type: MemRefType):
        super().__init__(operands=[input], properties={"offset": IntegerAttr(offset, i64)}, result_types=[type])

    def verify_(self) -> None:
        off = self.offset.value.data
        n_in, n_out = numel(shape_of(self.input)), numel(shape_of(self.result))
        if not isinstance(n_in, int) or not isinstance(n_out, int):
            # the offset is a constant: the piece must stay in bounds at every size in range
            _check(not isinstance(n_in, int) or isinstance(n_out, int),
                   f"buf.subview: a piece of symbolic size {n_out} of a buffer of static size {n_in}")
            ranges = symbols_of(self)
            for values in ({k: hi for k, (lo, hi) in ranges.items()}, {k: lo for k, (lo, hi) in ranges.items()}):
                inner, outer = evaluate([n_out, n_in], values)
                _check(off + inner <= outer, f"buf.subview: elements [{off}, {off} + {n_out}) overflow the {n_in} of the input")
            n_in = n_out = 0
        _check(0 <= off and off + n_out <= n_in, f"buf.subview: elements [{off}, {off + n_out}) overflow the {n_in} of the input")
        _check(self.input.type.element_type == self.result.type.element_type, "buf.subview: element type must not change")


#: Zero-copy views: an op reading or writing one touches the bytes of its root buffer.
ALIAS_OPS: tuple[type[IRDLOperation], ...] = (ReshapeOp, SubviewOp)


def root_buffer(value: SSAValue) -> SSAValue:
    """The buffer ``value`` aliases, following `buf.reshape`s and `buf.subview`s back to their source."""
    while isinstance(value.owner, ALIAS_OPS):
        value = value.owner.operands[0]
    return value


def views_and_readers(alloc: AllocOp) -> tuple[list[Operation], list[tuple[Operation, SSAValue]]] | None:
    """The reshapes of ``alloc``'s buffer (deepest first) and every (op, operand) that uses it
    through them; None when a subview (part of the bytes) takes it."""
    views: list[Operation] = []
    readers: list[tuple[Operation, SSAValue]] = []
    pending = [alloc.result]
    while pending:
        value = pending.pop()
        for use in value.uses:
            user = use.operation
            if isinstance(user, ReshapeOp):
                views.append(user)
                pending.append(user.result)
            elif isinstance(user, SubviewOp):
                return None
            else:
                readers.append((user, value))
    return views[::-1], readers


def lifetime(root: SSAValue, block: Block, index: dict[Operation, int]) -> tuple[int, int]:
    """The ops of ``block`` (positions in ``index``) during which the buffer ``root`` is live:
    from the first op that touches it (its writer) to the last that reads it, an op touching an
    alias of it (`buf.reshape`, `buf.subview`, chains of them) counting as touching it; a buffer
    nothing touches lives at its definition. What `plan-memory` plans and `buf.arena` verifies."""
    touched: list[int] = []
    pending: list[SSAValue] = [root]
    while pending:
        value = pending.pop()
        for use in value.uses:
            if isinstance(use.operation, ALIAS_OPS):
                pending.append(use.operation.results[0])  # an alias: its users use the root
            elif (user := block.find_ancestor_op_in_block(use.operation)) is not None:
                touched.append(index[user])
    own = index[root.owner] if isinstance(root.owner, Operation) and root.owner in index else 0
    return min(touched, default=own), max(touched, default=own)


def verify_arena_lifetimes(arena: ArenaOp, values: Mapping[str, int] | None = None) -> None:
    """What the generated code assumes of an arena's views (it gives distinct buffers ``noalias``
    and runs each kernel's output apart from its inputs): no two views of different bytes are live
    at the same op while their byte ranges overlap. `plan-memory` never places them so; a buf
    module from anywhere else is held to the same rule. Symbolic sizes are taken at ``values``
    (name -> size; default: the top of each range)."""
    block = arena.parent_block()
    if block is None:
        return
    index = {op: i for i, op in enumerate(block.ops)}
    views = [(lifetime(u.operation.result, block, index), u.operation) for u in arena.result.uses
             if isinstance(u.operation, ViewOp) and u.operation.parent_block() is block]
    views.sort(key=lambda v: v[0][0])
    live: list[tuple[int, int, int, ViewOp]] = []  # (last op, first byte, end byte, view) of the views live now
    for (start, end), view in views:
        lo = view.offset.value.data
        hi = lo + nbytes(view.result.type, values if values is not None else largest(view))
        live = [entry for entry in live if entry[0] >= start]
        for other_end, other_lo, other_hi, other in live:
            if lo < other_hi and other_lo < hi:
                _overlap(other, (other_lo, other_hi), view, (lo, hi), list(block.ops)[start])
        if hi > lo:
            live.append((end, lo, hi, view))


def _overlap(a: ViewOp, a_bytes: tuple[int, int], b: ViewOp, b_bytes: tuple[int, int], at: Operation) -> None:
    from tensor_graphs.diagnostics import describe, location_of

    def named(view: ViewOp, span: tuple[int, int]) -> str:
        name = f"%{view.result.name_hint}" if view.result.name_hint else "a view"
        return f"{name} (bytes [{span[0]}, {span[1]}), {view.result.type})"

    where = f" at {loc}" if (loc := location_of(at)) else ""
    raise VerifyException(
        f"buf.arena: {named(a, a_bytes)} and {named(b, b_bytes)} overlap but are live at the same time "
        f"(both at {describe(at)}{where}): a kernel writing one would change the other")


# --------------------------------------------------------------------------- kernels


class KernelOp(IRDLOperation, abc.ABC):
    """One kernel call: reads ``inputs``, writes ``outputs`` (all memrefs, no results).

    Subclasses say how many inputs they take and check shapes in ``verify_kernel``.
    """

    inputs = var_operand_def(AnyMemRef)
    outputs = var_operand_def(AnyMemRef)
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = (
        "`ins` `(` $inputs `:` type($inputs) `)` `outs` `(` $outputs `:` type($outputs) `)` attr-dict"
    )

    #: Allowed numbers of inputs.
    NUM_INPUTS: ClassVar[tuple[int, ...]]
    #: Allowed numbers of outputs (a second output, where allowed, is the kernel's scratch).
    NUM_OUTPUTS: ClassVar[tuple[int, ...]] = (1,)

    def __init__(
        self,
        inputs: Sequence[SSAValue],
        outputs: Sequence[SSAValue],
        properties: dict[str, Attribute] | None = None,
    ):
        super().__init__(operands=[list(inputs), list(outputs)], properties=properties or {})

    @property
    def output(self) -> SSAValue:
        return self.outputs[0]

    @property
    def buffers(self) -> tuple[SSAValue, ...]:
        """Every buffer the kernel's code touches: its inputs and outputs, then those of the
        kernels in its regions that are not among them (a packed GEMM's `packing`: the
        activation its windows read)."""
        own = (*self.inputs, *self.outputs)
        nested = [v for region in self.regions for op in region.walk() if isinstance(op, KernelOp)
                  for v in (*op.inputs, *op.outputs)]
        return own + tuple(dict.fromkeys(v for v in nested if all(v is not u for u in own)))

    def verify_(self) -> None:
        _check(
            len(self.inputs) in self.NUM_INPUTS,
            f"{self.name}: expected {' or '.join(map(str, self.NUM_INPUTS))} input(s), got {len(self.inputs)}",
        )
        _check(
            len(self.outputs) in self.NUM_OUTPUTS,
            f"{self.name}: expected {' or '.join(map(str, self.NUM_OUTPUTS))} output(s), got {len(self.outputs)}",
        )
        try:
            self.verify_kernel([shape_of(v) for v in self.inputs], shape_of(self.output))
        except ShapeError as e:
            raise VerifyException(f"{self.name}: {e}") from None

    @abc.abstractmethod
    def verify_kernel(self, ins: list[tuple[int, ...]], out: tuple[int, ...]) -> None: ...


def _same(expected: tuple[int, ...], out: tuple[int, ...], what: str) -> None:
    if tuple(expected) != tuple(out):
        raise ShapeError(f"output shape {list(out)} should be {list(expected)} ({what})")


def _verify_epilogue(op: KernelOp, ins: list[tuple[int, ...]], out: tuple[int, ...], operands: int = 0) -> None:
    """What a GEMM's epilogue needs: an accumulator (third input) that broadcasts to the output,
    a known activation, f32 buffers (but for the first ``operands`` inputs: bf16 operands read
    as pairs)."""
    if len(ins) == 3 and not is_broadcastable_to(ins[2], out):
        raise ShapeError(f"accumulator {list(ins[2])} does not broadcast to {list(out)}")
    if op.activation.data not in ACTIVATIONS:  # type: ignore[attr-defined]
        raise ShapeError(f"unknown activation '{op.activation.data}'")  # type: ignore[attr-defined]
    narrow = getattr(op, "narrow_buffers", ())  # (bf16 buffers an epilogue body converts itself)
    els = {v.type.element_type for v in (*op.inputs[operands:], op.output) if v not in narrow}  # type: ignore[attr-defined]
    (el,) = els if len(els) == 1 else (f32,) if not els else (None,)
    integer = isinstance(el, IntegerType) and el.width.data > 1
    if not (el in (f32, f64) or integer and op.activation.data == "none"):  # type: ignore[attr-defined]
        raise ShapeError(f"buffers of one dtype expected, float32, float64 or an integer (without activation), got {', '.join(map(str, els))}")


@irdl_op_definition
class MatmulOp(KernelOp):
    """``out = alpha * op(a) @ op(b) + beta * acc`` (one `cblas_sgemm` per batch)."""

    name = "buf.matmul"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2, 3)
    transpose_a = prop_def(BoolAttr, default_value=bool_attr(False))
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))
    alpha = prop_def(FloatAttr, default_value=float_attr(1.0))
    beta = prop_def(FloatAttr, default_value=float_attr(0.0))
    #: Applied to each block of the output right after the GEMM writes it (an epilogue).
    activation = prop_def(StringAttr, default_value=StringAttr("none"))

    @property
    def flags(self) -> tuple[bool, bool, float, float]:
        return (
            bool(self.transpose_a.value.data),
            bool(self.transpose_b.value.data),
            self.alpha.value.data,
            self.beta.value.data,
        )

    def verify_kernel(self, ins, out):
        ta, tb, _, _ = self.flags
        _same(matmul_shape(ins[0], ins[1], ta, tb), out, "matmul")
        _verify_epilogue(self, ins, out)


@irdl_op_definition
class PackedMatmulOp(KernelOp):
    """``out = act(alpha * a @ B + beta * acc)`` with ``B[K, N]`` in column panels: a
    `buf.packed_weight`, or panels the graph packs itself (`buf.im2col` with ``panels``).

    ``a`` is ``[..., M, K]`` (its batch dims fold into M), the packed weight
    ``[ceil(N / NR), K, NR]``, ``out`` ``[..., M, N]``; ``acc`` (a bias ``[N]`` or a residual)
    broadcasts to ``out``. A fourth input, an ``addend`` broadcasting to ``out``, is added too
    (``act(alpha * a @ B + beta * acc + addend)``: a residual after a bias, `fuse-gemm-addend`).
    The activation is applied to each output tile as it is written.

    A batch of G GEMMs: panels ``[G, ceil(N / NR), K, NR]``, ``out`` ``[G, M, N]`` (G may be a
    size symbol) and either ``a`` ``[G', M, K]`` without accumulator, GEMM g's A ``a[g % G']``
    (G' divides G: a Winograd convolution's ``a * a`` transformed weights over a batch of
    images, `buf.winograd_input`), or one ``a`` ``[M, K]`` for every GEMM (a convolution's weight over a
    batch of images, each image's windows packed by `buf.im2col`) with the epilogue's
    accumulator and addend broadcasting to ``out``.

    Cheaper operands: panels of bf16 pairs along K ("bf16kpanels", ``[P, ceil(K / 2), 2 NR]``
    bf16) by a bf16 ``a`` (`pairs`); panels of int8 quads along K with two rows of their columns'
    scales and offsets ("int8kpanels", ``[P, ceil(K / 4) + 2, 4 NR]`` i8) by the rows
    `buf.quantize_rows` made (i8 ``[..., M, 4 ceil(K / 4) + 4]``: `quads`); the epilogue stays
    float32. The output may be bf16 (`narrow-gemm-output`, `fuse-gemm-elementwise`): each
    epilogue value rounded to nearest even as it is stored, or the bf16 an epilogue body yields.

    An ``epilogue`` region, in place of an activation: a body (as `buf.fused_elementwise`'s)
    from one float32 to one float32 (or to the bf16 of a bf16 output), applied to each output after the addends
    (`fuse-gemm-elementwise`: the elementwise loop after the GEMM, such as a bf16 model's
    rounding, ReLU or GELU and rounding again); or from two, the sum and the value of the GEMM's
    last input (its accumulator, times beta, or its addend; a bf16 one as it is, the body
    widening it), which it then takes in place of the sum's adding it (a bf16 model's residual:
    ``round(relu(round(round(y) + r)))``)::

        buf.packed_matmul ins(...) outs(%y : memref<128x3072xf32>) {beta = 1.0 : f32} epilogue {
        ^bb0(%0: f32):
          %1 = arith.truncf %0 : f32 to bf16
          ...
          buf.yield %5 : f32
        }

    A ``packing`` region, when the GEMM packs its own panels (`fuse-panels-into-gemm`): the
    `buf.im2col` (with ``panels``) that writes them, moved inside. Its windows are written a
    chunk of panels at a time, each chunk into a scratch that stays in the cache, right before
    the GEMM reads it (or, where the GEMM's blocking cannot take chunks, all of them first into
    the rhs buffer); over a batch of images (a batch of GEMMs), each image's in turn. Its input,
    read during the GEMM, lives as long as the GEMM (`lifetime`: an op inside a region counts as
    the op that holds it)::

        buf.packed_matmul ins(%w, %p : memref<64x576xbf16>, memref<98x288x64xbf16>) outs(%y : ...) packing {
          buf.im2col ins(%x : memref<1x64x56x56xf32>) outs(%p : memref<98x288x64xbf16>) {kernel = ..., panels = 32 : i64}
        }
    """

    name = "buf.packed_matmul"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2, 3, 4)
    alpha = prop_def(FloatAttr, default_value=float_attr(1.0))
    beta = prop_def(FloatAttr, default_value=float_attr(0.0))
    activation = prop_def(StringAttr, default_value=StringAttr("none"))
    epilogue = opt_region_def("single_block")
    packing = opt_region_def("single_block")
    irdl_options = (AttrSizedRegionSegments(as_property=True),)  # (with KernelOp's)
    traits = traits_def(NoTerminator())  # (the packing region's im2col ends its block; the epilogue's buf.yield)
    assembly_format = (
        "`ins` `(` $inputs `:` type($inputs) `)` `outs` `(` $outputs `:` type($outputs) `)` attr-dict "
        "(`epilogue` $epilogue^)? (`packing` $packing^)?"
    )

    def __init__(self, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue], properties: dict[str, Attribute] | None = None,
                 epilogue: Region | None = None, packing: Region | None = None):
        IRDLOperation.__init__(self, operands=[list(inputs), list(outputs)], properties=properties or {},
                               regions=[epilogue, packing])

    @property
    def panel_packing(self) -> Im2colOp | None:
        """The `buf.im2col` of the ``packing`` region (the GEMM packs its own panels), or None."""
        if self.packing is None or not self.packing.blocks:
            return None
        op = self.packing.block.first_op
        return op if isinstance(op, Im2colOp) else None

    def _verify_packing(self) -> None:
        if self.packing is None or not self.packing.blocks:
            return
        ops = list(self.packing.block.ops)
        im2col = self.panel_packing
        if len(ops) != 1 or im2col is None or im2col.panel_columns <= 0 or im2col.output is not self.inputs[1]:
            raise ShapeError("the packing region holds one buf.im2col with panels that writes the rhs (the second input)")
        panels, images = shape_of(self.inputs[1]), shape_of(im2col.inputs[0])[0]
        if not (len(panels) == 3 and images == 1 or len(panels) == 4 and panels[0] == images and isinstance(images, int)):
            raise ShapeError("a GEMM packs its own panels for one image ([panels, K, NR] from a [1, C, H, W] input) "
                             "or a static count of them ([N, panels, K, NR] from [N, C, H, W])")

    @property
    def epilogue_body(self) -> Block | None:
        """The ``epilogue`` region's block, or None."""
        return self.epilogue.block if self.epilogue is not None and self.epilogue.blocks else None

    @property
    def body_takes_addend(self) -> bool:
        """True when the epilogue body takes two arguments: the sum, then (in place of adding it)
        the value of the last input after the operands, scaled (its accumulator or its addend)."""
        body = self.epilogue_body
        return body is not None and len(body.args) == 2

    def _verify_epilogue_body(self) -> None:
        body = self.epilogue_body
        if body is None:
            return
        if self.activation.data != "none":
            raise ShapeError(f"an epilogue body takes the place of the activation, got activation '{self.activation.data}'")
        term = body.last_op
        out_el = self.output.type.element_type  # type: ignore[attr-defined]
        if len(body.args) not in (1, 2) or body.args[0].type != f32 or not isinstance(term, YieldOp) \
                or len(term.values) != 1 or term.values[0].type not in (f32, out_el):
            raise ShapeError("the epilogue body takes one f32 (or two: the sum and the last input's value) and yields one "
                             "f32 (or a value of the output's dtype, bf16)")
        if len(body.args) == 2:
            if len(self.inputs) < 3:
                raise ShapeError("an epilogue body of two arguments takes the last input's value: the GEMM has none after its operands")
            if body.args[1].type != self.inputs[-1].type.element_type:  # type: ignore[attr-defined]
                raise ShapeError("an epilogue body's second argument has the last input's dtype")
            if body.args[1].type == bf16 and len(self.inputs) == 3 and self.beta.value.data != 1.0:
                raise ShapeError("an epilogue body takes a bf16 accumulator as it is: beta must be 1")

    @property
    def narrow_buffers(self) -> tuple[SSAValue, ...]:
        """The buffers it reads or writes as bf16 beside float32 ones (`narrow-gemm-output`): a
        bf16 output (its epilogue's float32 value rounded as it is stored, or the bf16 its
        epilogue body yields); the last input, where the epilogue body takes it as bf16."""
        narrow = [self.output] if self.output.type.element_type == bf16 else []  # type: ignore[attr-defined]
        body = self.epilogue_body
        if body is not None and len(body.args) == 2 and body.args[1].type == bf16:
            narrow.append(self.inputs[-1])
        elif (self.pairs or self.quads) and len(self.inputs) >= 3 and self.inputs[-1].type.element_type == bf16 \
                and (len(self.inputs) == 4 or self.beta.value.data == 1.0):  # type: ignore[attr-defined]
            narrow.append(self.inputs[-1])  # (a bf16 residual the epilogue widens: `narrow-gemm-output`'s rounded activations)
        return tuple(narrow)

    def verify_kernel(self, ins, out):
        self._verify_epilogue_body()
        self._verify_packing()
        a, packed = ins[0], ins[1]
        if len(packed) == 4:  # a batch of GEMMs: one set of panels each, one A each or one for all
            g, panels, k, nr = packed
            if self.pairs:  # bf16 pairs along K: [G, panels, K / 2, 2 NR] by a bf16 lhs
                k, nr = 2 * k, nr // 2
            shared = len(a) == 2
            if len(a) not in (2, 3) or len(a) == 3 and (not divides(a[0], g) or len(ins) >= 3) or a[-1] != k or len(out) != 3 \
                    or tuple(out[:2]) != (g, a[-2]) or nr <= 0 or -(-out[2] // nr) != panels:
                raise ShapeError(
                    f"a batch of packed GEMMs takes a [G, M, K] lhs (without accumulator) or one [M, K] for all, "
                    f"[G, ceil(N / NR), K, NR] panels and writes [G, M, N]; got {list(a)}, {list(packed)} -> {list(out)}"
                )
            if shared and len(ins) == 4 and not is_broadcastable_to(ins[3], out):
                raise ShapeError(f"addend {list(ins[3])} does not broadcast to {list(out)}")
            _verify_epilogue(self, ins[:3], out, operands=2 if self.pairs else 0)
            return
        if len(a) < 2 or len(packed) != 3:
            raise ShapeError(f"expected a [..., M, K] lhs and a [panels, K, NR] packed weight, got {list(a)} and {list(packed)}")
        panels, k, nr = packed
        if self.pairs:  # bf16 pairs along K: [panels, K / 2, 2 NR] by a bf16 lhs of even K
            if not isinstance(self.inputs[0].type.element_type, BFloat16Type):  # type: ignore[attr-defined]
                raise ShapeError(f"panels of bf16 pairs along K take a bf16 lhs, got {self.inputs[0].type}")
            k, nr = 2 * k, nr // 2
        if self.quads:  # int8 quads along K and two rows of scales: [panels, K / 4 + 2, 4 NR] by quantised rows
            if self.inputs[0].type.element_type != i8 or k <= INT8K_SCALE_ROWS:  # type: ignore[attr-defined]
                raise ShapeError(f"int8 panels take the rows quantised by buf.quantize_rows (i8), got {self.inputs[0].type}")
            k, nr = 4 * (k - INT8K_SCALE_ROWS) + 4, nr // 4  # the lhs: codes, then each row's scale (4 bytes)
        if a[-1] != k:
            raise ShapeError(f"contraction dims differ: lhs {list(a)} has K={a[-1]}, the packed weight {list(packed)} K={k}")
        if len(out) != len(a) or tuple(out[:-1]) != tuple(a[:-1]):
            raise ShapeError(f"output shape {list(out)} should be {list(a[:-1])} + [N]")
        if nr <= 0 or -(-out[-1] // nr) != panels:
            raise ShapeError(f"N={out[-1]} needs {-(-out[-1] // max(nr, 1))} panels of {nr} columns, the packed weight has {panels}")
        if len(ins) == 4 and not is_broadcastable_to(ins[3], out):
            raise ShapeError(f"addend {list(ins[3])} does not broadcast to {list(out)}")
        _verify_epilogue(self, ins[:3], out, operands=2 if self.pairs or self.quads else 0)

    @property
    def flags(self) -> tuple[float, float]:
        return self.alpha.value.data, self.beta.value.data

    @property
    def quads(self) -> bool:
        """True when the panels are int8 quads along K (an "int8kpanels" packed weight,
        `packing.FORMATS`) and ``a`` the rows quantised by `buf.quantize_rows`: each step an
        integer dot product of four bytes, the sums scaled back to float32 in the epilogue."""
        return self.inputs[1].type.element_type == i8  # type: ignore[attr-defined]

    @property
    def pairs(self) -> bool:
        """True when the panels are bf16 pairs along K (a "bf16kpanels" packed weight,
        ``[panels, K / 2, 2 NR]``) and ``a`` is bf16: each step a dot product of pairs."""
        return isinstance(self.inputs[1].type.element_type, BFloat16Type)  # type: ignore[attr-defined]

    @property
    def k_words(self) -> Dim:
        """Words along K of its panels: bf16 pairs or int8 quads (without the scales' rows), or floats."""
        return shape_of(self.inputs[1])[-2] - (INT8K_SCALE_ROWS if self.quads else 0)


@irdl_op_definition
class QuantizeRowsOp(KernelOp):
    """Each row of ``a`` (float32 ``[..., M, K]``) as int8 codes for the int8 GEMM
    (`buf.packed_matmul` over "int8kpanels"): ``out`` i8 ``[..., M, 4 ceil(K / 4) + 4]``, per row
    the codes ``round(a / s) + 128`` as unsigned bytes (`packing.INT8_ZERO`; 128 past K) and
    then, in its last four bytes, the float32 scale ``s = max |row| / 127`` (NaN when the row
    holds a NaN or an infinity, so that the row's products are NaN)."""

    name = "buf.quantize_rows"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)

    def verify_kernel(self, ins, out):
        (a,) = ins
        if len(a) < 1 or tuple(out[:-1]) != tuple(a[:-1]) or out[-1] != 4 * -(-a[-1] // 4) + 4:
            raise ShapeError(f"the rows [..., M, K] quantise to [..., M, 4 ceil(K / 4) + 4] bytes, got {list(a)} -> {list(out)}")
        if self.inputs[0].type.element_type != f32 or self.output.type.element_type != i8:  # type: ignore[attr-defined]
            raise ShapeError(f"quantize_rows reads f32 and writes i8, got {self.inputs[0].type} -> {self.output.type}")


@irdl_op_definition
class QuantizedMatvecOp(KernelOp):
    """``out = act(alpha * a @ B + beta * bias)`` for a few rows of ``a`` (a matrix-vector
    product: a decode step), with ``B[K, N]`` in column panels in a cheaper format than float32
    (`dialects.packing.FORMATS`), converted to float32 in registers as it streams:

    - ``format = "bf16"``: ins ``(a, panels [, bias])``, panels ``memref<P x K x NR x bf16>``;
    - ``format = "int8"``: ins ``(a, panels, scales [, bias])``, panels ``memref<P x K x NR x i8>``
      and their per-column scales ``memref<P x NR x f32>`` (``B[k, n] = q[k, n] * scale[n]``);
    - ``format = "bf16dot"``: ins ``(a, panels [, bias])``, panels paired along K
      ``memref<P x ceil(K/2) x 2NR x bf16>`` (`packing.FORMATS` "bf16k"), multiplied by the rows
      of ``a`` rounded to bf16 with AVX512-BF16's dot products (targets that have them);
    - ``format = "int4g32"`` (any `packing.Int4Scheme`: ``int4[z]g{32,64,128}``): ins ``(a,
      codes, scales [, zeros] [, bias])``, codes two a byte ``memref<P x K x NR/2 x i8>``, per
      group scales ``memref<P x G x NR x bf16>`` and (``z``) zero points ``memref<P x G x NR x
      i8>``, ``G = ceil(K / group)``: ``B[k, n] = (q[k, n] - zero[k / group, n]) * scale[k / group, n]``.
    - ``format = "int4dot"``: ins ``(a, codes, scales [, bias])``: Q4_0's codes in the order of
      integer dot products ``memref<P x ceil(K/8) x 4NR x i8>`` (`packing.INT4_DOT_SCHEME`) and
      their scales ``memref<P x ceil(K/32) x NR x bf16>``, times the rows of ``a`` quantised to
      int8 per group of 32 (``vpdpbusd`` where the target has VNNI, else ``pmaddubsw``).

    ``a`` is ``[..., M, K]`` (the rows fold), ``out`` ``[..., M, N]``, ``bias`` ``[N]`` or an
    accumulator of the output's shape (a residual added in the epilogue).
    """

    name = "buf.quantized_matvec"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2, 3, 4)
    format = prop_def(StringAttr)
    alpha = prop_def(FloatAttr, default_value=float_attr(1.0))
    beta = prop_def(FloatAttr, default_value=float_attr(0.0))
    activation = prop_def(StringAttr, default_value=StringAttr("none"))

    #: the element type of the panels of each format
    PANEL_TYPES: ClassVar[dict[str, str]] = {"bf16": "bf16", "int8": "i8", "bf16dot": "bf16", "int4dot": "i8"}

    @staticmethod
    def int4_scheme(fmt: str):
        """The `packing.Int4Scheme` a format names, or None (bf16, int8, bf16dot)."""
        from tensor_graphs.dialects.packing import Int4Scheme

        found = Int4Scheme.of(fmt)
        return found[0] if found is not None and not found[1] else None

    @staticmethod
    def fixed_inputs(fmt: str) -> int:
        """The inputs before the optional bias: the lhs and the format's packed arrays."""
        scheme = QuantizedMatvecOp.int4_scheme(fmt)
        return 1 + len(scheme.parts) if scheme is not None else (3 if fmt in ("int8", "int4dot") else 2)

    @property
    def bias(self) -> SSAValue | None:
        extra = len(self.inputs) - self.fixed_inputs(self.format.data)
        return self.inputs[-1] if extra == 1 else None

    def verify_kernel(self, ins, out):
        fmt = self.format.data
        scheme = self.int4_scheme(fmt)
        if fmt not in self.PANEL_TYPES and scheme is None:
            raise ShapeError(f"unknown format '{fmt}' ({', '.join(self.PANEL_TYPES)}, int4[z]g<group>)")
        fixed = self.fixed_inputs(fmt)
        if len(ins) not in (fixed, fixed + 1):
            raise ShapeError(f"format {fmt} takes {fixed} inputs and an optional bias, got {len(ins)}")
        a, panels = ins[0], ins[1]
        if len(a) < 2 or len(panels) != 3:
            raise ShapeError(f"expected a [..., M, K] lhs and [P, K, NR] panels, got {list(a)} and {list(panels)}")
        p, k, nr = panels
        if fmt == "bf16dot":  # rows of K pairs, 2 NR halves each
            k, nr = (a[-1] if -(-a[-1] // 2) == k else -1), (nr // 2 if nr % 2 == 0 else 0)
        if fmt == "int4dot":  # K in rows of 8, a column's 4 bytes each: scales as int4g32's
            from tensor_graphs.dialects.packing import INT4_DOT_SCHEME

            k, nr, scheme = (a[-1] if -(-a[-1] // 8) == k else -1), nr // 4, INT4_DOT_SCHEME
            if tuple(ins[2]) != (p, -(-a[-1] // scheme.group), nr):
                raise ShapeError(f"the scales of int4dot panels {list(panels)} are [{p}, {-(-a[-1] // scheme.group)}, {nr}], "
                                 f"got {list(ins[2])}")
        elif scheme is not None:  # two codes a byte
            nr *= 2
            for part in ins[2:fixed]:
                if tuple(part) != (p, -(-k // scheme.group), nr):
                    raise ShapeError(f"the scales and zero points of {fmt} panels {list(panels)} are "
                                     f"[{p}, {-(-k // scheme.group)}, {nr}], got {list(part)}")
        if a[-1] != k or len(out) != len(a) or tuple(out[:-1]) != tuple(a[:-1]) or nr <= 0 or -(-out[-1] // nr) != p:
            raise ShapeError(f"{list(a)} x panels {list(panels)} cannot write {list(out)}")
        if fmt == "int8" and tuple(ins[2]) != (p, nr):
            raise ShapeError(f"the scales of panels {list(panels)} are [{p}, {nr}], got {list(ins[2])}")
        if len(ins) == fixed + 1 and tuple(ins[-1]) not in ((out[-1],), tuple(out)):
            raise ShapeError(f"the accumulator is a bias [{out[-1]}] or of the output's shape {list(out)}, got {list(ins[-1])}")
        if self.activation.data not in ACTIVATIONS:
            raise ShapeError(f"unknown activation '{self.activation.data}'")
        packed = ("i8", "bf16", "i8")[: fixed - 1] if scheme is not None else (self.PANEL_TYPES[fmt],)
        for v, element in zip(self.inputs[1:], packed):
            if str(v.type.element_type) != element:  # type: ignore[attr-defined]
                raise ShapeError(f"{fmt} panels hold {', '.join(packed)}, got {v.type}")
        others = [v for i, v in enumerate((*self.inputs, self.output)) if not 1 <= i <= len(packed)]
        if {v.type.element_type for v in others} != {f32}:  # type: ignore[attr-defined]
            raise ShapeError("the lhs, scales, bias and output must be f32 buffers")


class ElementwiseBinaryKernel(KernelOp, abc.ABC):
    """``out = a <op> b`` with broadcasting."""

    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)

    def verify_kernel(self, ins, out):
        _same(broadcast_shapes(*ins), out, "broadcast of the inputs")


@irdl_op_definition
class AddOp(ElementwiseBinaryKernel):
    name = "buf.add"


@irdl_op_definition
class SubOp(ElementwiseBinaryKernel):
    name = "buf.sub"


@irdl_op_definition
class MulOp(ElementwiseBinaryKernel):
    name = "buf.mul"


@irdl_op_definition
class DivOp(ElementwiseBinaryKernel):
    name = "buf.div"


class ElementwiseUnaryKernel(KernelOp, abc.ABC):
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "same as the input")


@irdl_op_definition
class CheckNonzeroOp(ElementwiseUnaryKernel):
    """`tg.check_nonzero`: a copy of the input, each element checked against zero (a run-time
    error naming the integer division by zero)."""

    name = "buf.check_nonzero"


@irdl_op_definition
class ReluOp(ElementwiseUnaryKernel):
    name = "buf.relu"


@irdl_op_definition
class CopyOp(ElementwiseUnaryKernel):
    """Copies a buffer (used where an output must not alias an input, a weight or another output)."""

    name = "buf.copy"


@irdl_op_definition
class TransposeOp(KernelOp):
    """``out.shape[d] = in.shape[perm[d]]``: a strided copy."""

    name = "buf.transpose"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    perm = prop_def(DenseArrayBase.constr(i64))

    @property
    def permutation(self) -> tuple[int, ...]:
        return tuple(self.perm.get_values())

    def verify_kernel(self, ins, out):
        _same(permute_shape(ins[0], self.permutation), out, f"perm {list(self.permutation)}")


@irdl_op_definition
class BiasActivationOp(KernelOp):
    """``out = activation(x + bias)`` in one sweep."""

    name = "buf.bias_activation"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)
    activation = prop_def(StringAttr, default_value=StringAttr("none"))

    def verify_kernel(self, ins, out):
        if self.activation.data not in ACTIVATIONS:
            raise ShapeError(f"unknown activation '{self.activation.data}'")
        _same(ins[0], out, "same as the input")
        if not is_broadcastable_to(ins[1], out):
            raise ShapeError(f"bias {list(ins[1])} does not broadcast to {list(out)}")


@irdl_op_definition
class UnaryOp(ElementwiseUnaryKernel):
    """``out = fn(x)`` for a function of `functions.UNARY_FUNCTIONS`."""

    name = "buf.unary"
    fn = prop_def(StringAttr)

    def verify_kernel(self, ins, out):
        super().verify_kernel(ins, out)
        if self.fn.data not in UNARY_FUNCTIONS:
            raise ShapeError(f"unknown function '{self.fn.data}'")


@irdl_op_definition
class BinaryOp(ElementwiseBinaryKernel):
    """``out = fn(a, b)`` with broadcasting, for a function of `functions.BINARY_FUNCTIONS`."""

    name = "buf.binary"
    fn = prop_def(StringAttr)

    def verify_kernel(self, ins, out):
        super().verify_kernel(ins, out)
        if self.fn.data not in BINARY_FUNCTIONS:
            raise ShapeError(f"unknown function '{self.fn.data}'")


@irdl_op_definition
class SelectOp(KernelOp):
    """``out = cond ? a : b`` with broadcasting."""

    name = "buf.select"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (3,)

    def verify_kernel(self, ins, out):
        _same(broadcast_shapes(*ins), out, "broadcast of the inputs")


@irdl_op_definition
class CastOp(ElementwiseUnaryKernel):
    """Converts each element to the output's element type."""

    name = "buf.cast"


@irdl_op_definition
class IotaOp(KernelOp):
    """``out[i] = start + i * step`` over a 1-D output (`tg.iota`), its size counted at run time
    when symbolic."""

    name = "buf.iota"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (0,)
    start = prop_def(FloatAttr)
    step = prop_def(FloatAttr)

    def verify_kernel(self, ins, out):
        if len(out) != 1:
            raise ShapeError(f"the output must be 1-D, got {list(out)}")


@irdl_op_definition
class SizeOp(KernelOp):
    """``out[] = size``, a size that is an expression of the size symbols (`tg.size`), from
    ``dims`` at run time."""

    name = "buf.size"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (0,)
    size = prop_def(StringAttr)

    def verify_kernel(self, ins, out):
        if out != ():
            raise ShapeError(f"the output must be rank 0, got {list(out)}")


@irdl_op_definition
class ReduceOp(KernelOp):
    """``out = kind(x)`` over ``dims`` (a kind of `functions.REDUCTIONS`: sum, mean, max, min,
    prod, any)."""

    name = "buf.reduce"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    kind = prop_def(StringAttr)
    dims = prop_def(DenseArrayBase.constr(i64))
    keepdim = prop_def(BoolAttr, default_value=bool_attr(False))

    def verify_kernel(self, ins, out):
        from tensor_graphs.dialects.functions import REDUCTIONS

        if self.kind.data not in REDUCTIONS:
            raise ShapeError(f"unknown reduction '{self.kind.data}' ({', '.join(REDUCTIONS)})")
        dims = tuple(self.dims.get_values())
        _same(reduced_shape(ins[0], dims, bool(self.keepdim.value.data)), out, f"reduction over {list(dims)}")


@irdl_op_definition
class ArgReduceOp(KernelOp):
    """``out`` = the first position of the largest (``kind = "max"``) or smallest (``"min"``)
    element along ``dim`` (`tg.arg_reduce`; a NaN counts as both), i64."""

    name = "buf.arg_reduce"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    kind = prop_def(StringAttr)
    dim = prop_def(IntegerAttr[i64])
    keepdim = prop_def(BoolAttr, default_value=bool_attr(False))

    def verify_kernel(self, ins, out):
        d = self.dim.value.data
        if self.kind.data not in ("max", "min"):
            raise ShapeError(f"unknown arg reduction '{self.kind.data}' (max, min)")
        if not 0 <= d < len(ins[0]) or ins[0][d] == 0:
            raise ShapeError(f"dim {d} must be a non-empty dim of {list(ins[0])}")
        _same(reduced_shape(ins[0], (d,), bool(self.keepdim.value.data)), out, f"positions along dim {d}")


@irdl_op_definition
class CumsumOp(KernelOp):
    """Running reduction along ``dim`` (`tg.cumsum`: ``reduce`` sum, prod, max, min or
    logsumexp); same shape and element type in and out."""

    name = "buf.cumsum"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    dim = prop_def(IntegerAttr[i64])
    reduce = prop_def(StringAttr, default_value=StringAttr("sum"))

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "same as the input")
        if not 0 <= self.dim.value.data < len(out):
            raise ShapeError(f"dim {self.dim.value.data} out of range for rank {len(out)}")


@irdl_op_definition
class ArgTopkOp(KernelOp):
    """`tg.argtopk`: ins(x) outs(positions i64 [..., k, ...], scratch i64 [2, n]): each row along
    ``dim`` is merge-sorted (stable) by position in the scratch, its first ``k`` written out."""

    name = "buf.argtopk"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    NUM_OUTPUTS: ClassVar[tuple[int, ...]] = (2,)
    k = prop_def(IntegerAttr[i64])
    dim = prop_def(IntegerAttr[i64])
    largest = prop_def(BoolAttr, default_value=bool_attr(True))

    def verify_kernel(self, ins, out):
        d, k = self.dim.value.data, self.k.value.data
        if not 0 <= d < len(ins[0]):
            raise ShapeError(f"dim {d} out of range for rank {len(ins[0])}")
        _same(tuple(k if i == d else n for i, n in enumerate(ins[0])), out, f"the input with k = {k} along dim {d}")
        if shape_of(self.outputs[1]) != (2, ins[0][d]):
            raise ShapeError(f"scratch {list(shape_of(self.outputs[1]))} should be [2, {ins[0][d]}]")


@irdl_op_definition
class PutOp(KernelOp):
    """`tg.put`: ins(x, offsets i64, values) -> out (x's shape): a copy of x, then
    ``out.flat[offsets[i]] = values[i]`` (with ``accumulate``, combined with what is there by
    ``reduce``: sum, prod, amax, amin) in order, each offset checked against ``[0, numel(x))``."""

    name = "buf.put"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (3,)
    accumulate = prop_def(BoolAttr, default_value=bool_attr(False))
    reduce = prop_def(StringAttr, default_value=StringAttr("sum"))

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "the input's shape")
        if tuple(ins[1]) != tuple(ins[2]):
            raise ShapeError(f"values {list(ins[2])} must have the offsets' shape {list(ins[1])}")


@irdl_op_definition
class LapackOp(KernelOp):
    """`tg.lapack`: ins(the routine's operands) -> out (its ``output`` for every problem), and the
    scratch (the routine's other outputs for one problem, reused across the batch: see
    `lapack_scratch_elements`). Per problem: the in-place slot copied from its operand, the
    LAPACKE/CBLAS call (`dialects.lapack`), its info checked."""

    name = "buf.lapack"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1, 2, 3)
    NUM_OUTPUTS: ClassVar[tuple[int, ...]] = (1, 2)
    routine = prop_def(StringAttr)
    output_name = prop_def(StringAttr, prop_name="output")
    params = prop_def(DictionaryAttr, default_value=DictionaryAttr({}))
    check = opt_prop_def(StringAttr)

    def verify_kernel(self, ins, out):
        from tensor_graphs.dialects import lapack

        try:
            batch, _, dims = lapack.problem(self.routine.data, ins, lapack_params(self.params))
            _, shape = lapack.slot_shape(self.routine.data, self.output_name.data, dims)
        except lapack.LapackShapeError as e:
            raise ShapeError(str(e)) from None
        _same((*batch, *shape), out, f"{self.routine.data}'s {self.output_name.data}")


def lapack_scratch_elements(routine: str, output: str, shapes: Sequence[tuple[int, ...]], params: dict[str, object]) -> dict[str, int]:
    """Where `buf.lapack`'s other slots sit in its scratch, in elements of the float type (an
    int32 takes one element): slot -> offset, and ``"size"`` the total."""
    from tensor_graphs.dialects import lapack

    _, _, dims = lapack.problem(routine, shapes, params)
    offsets, at = {}, 0
    for slot, (_, shape) in lapack.ROUTINES[routine].all_slots().items():
        if slot == output:
            continue
        offsets[slot] = at
        at += max(1, numel(shape(dims)))
    offsets["size"] = at
    return offsets


@irdl_op_definition
class GroupedMatmulOp(KernelOp):
    """`tg.grouped_matmul`: ins(a [S, K], w [G, K, N] (``[G, N, K]`` with ``transpose_b``),
    offsets i64 [G]) -> out [S, N]: one GEMM per non-empty group of rows (a GEMV for one row),
    through BLAS, split over column blocks x groups among the threads."""

    name = "buf.grouped_matmul"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (3,)
    transpose_b = prop_def(BoolAttr, default_value=bool_attr(False))

    def verify_kernel(self, ins, out):
        a, w, o = ins
        if len(a) != 2 or len(w) != 3 or tuple(o) != (w[0],):
            raise ShapeError(f"a [S, K], w [G, K, N] and offsets [G] expected, got {list(a)}, {list(w)}, {list(o)}")
        k, n = (w[2], w[1]) if self.transpose_b.value.data else (w[1], w[2])
        if a[1] != k:
            raise ShapeError(f"a has {a[1]} columns, w has K = {k}")
        _same((a[0], n), out, "[S, N]")


@irdl_op_definition
class PackedGroupedMatmulOp(KernelOp):
    """`tg.grouped_matmul` by a stack of packed weights: ins(a [S, K], packed [G, P, K, NR]
    (`buf.packed_weight`), offsets i64 [G]) -> out [S, N]: each group's rows times its panels in
    the packed GEMM's register tiles, with a run-time row count per group."""

    name = "buf.packed_grouped_matmul"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (3,)

    def verify_kernel(self, ins, out):
        a, w, o = ins
        if len(a) != 2 or len(w) != 4 or tuple(o) != (w[0],):
            raise ShapeError(f"a [S, K], packed [G, P, K, NR] and offsets [G] expected, got {list(a)}, {list(w)}, {list(o)}")
        if a[1] != w[2]:
            raise ShapeError(f"a has {a[1]} columns, the panels K = {w[2]}")
        if len(out) != 2 or out[0] != a[0] or not (w[1] - 1) * w[3] < out[1] <= w[1] * w[3]:
            raise ShapeError(f"output {list(out)} should be [{a[0]}, N] with N in ({(w[1] - 1) * w[3]}, {w[1] * w[3]}]")


@irdl_op_definition
class SoftmaxOp(KernelOp):
    """Softmax (or log-softmax with ``log = true``) along ``dim``."""

    name = "buf.softmax"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    dim = prop_def(IntegerAttr[i64])
    log = prop_def(BoolAttr, default_value=bool_attr(False))

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "same as the input")
        if not 0 <= self.dim.value.data < len(out):
            raise ShapeError(f"dim {self.dim.value.data} out of range for rank {len(out)}")


@irdl_op_definition
class LayerNormOp(KernelOp):
    """Layer norm over the last dim: ins(x, weight [D], bias [D])."""

    name = "buf.layer_norm"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (3,)
    eps = prop_def(FloatAttr, default_value=float_attr(1e-5))

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "same as the input")
        for s_ in ins[1:]:
            if tuple(s_) != tuple(out[-1:]):
                raise ShapeError(f"weight/bias shape {list(s_)} should be {list(out[-1:])}")


@irdl_op_definition
class RmsNormOp(KernelOp):
    """RMS norm over the last dim: ins(x, weight [D])."""

    name = "buf.rms_norm"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)
    eps = prop_def(FloatAttr, default_value=float_attr(1e-6))

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "same as the input")
        if tuple(ins[1]) != tuple(out[-1:]):
            raise ShapeError(f"weight shape {list(ins[1])} should be {list(out[-1:])}")


@irdl_op_definition
class EmbeddingOp(KernelOp):
    """Row gather: ins(table [V, D], indices [...]) -> out [..., D]."""

    name = "buf.embedding"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)

    def verify_kernel(self, ins, out):
        if len(ins[0]) != 2:
            raise ShapeError(f"the table must be rank 2, got {list(ins[0])}")
        _same((*ins[1], ins[0][1]), out, "indices shape + row size")


@irdl_op_definition
class TakeOp(KernelOp):
    """``out.flat[i] = x.flat[offsets.flat[i]]`` (`tg.take`): ins(x, offsets i64) -> out, the
    offsets' shape; each offset is checked against ``[0, numel(x))``."""

    name = "buf.take"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)

    def verify_kernel(self, ins, out):
        _same(ins[1], out, "the offsets' shape")


@irdl_op_definition
class Im2colOp(KernelOp):
    """The windows of `tg.im2col`: ins(x [N, C, H, W]) -> out [N, C, KH, KW, OH, OW], ``pad_value``
    outside the input. Each tap ``(i, j)`` is one strided copy of the input rows and columns it
    reads (a ``memcpy`` per row at stride 1) plus the border it pads.

    With ``reduce`` each window is reduced as it is read (max, sum or mean pooling):
    ``out [N, C, OH, OW]``, the windows never written.

    With ``panels = NR`` the windows are written as the rhs of a packed GEMM reads them: each
    image's matrix ``cols[C*KH*KW, OH*OW]`` in column panels, ``out [ceil(OH*OW / NR), C*KH*KW,
    NR]`` for one image, ``[N, ceil(OH*OW / NR), C*KH*KW, NR]`` for N (`buf.packed_matmul`, a
    batch of GEMMs; the last panel's padding columns are zeros); a bf16 ``out`` holds them as
    pairs along K, rounded (`pairs`: the bf16 GEMM's rhs). A 1x1 window at stride 1 is
    then the packing of ``x`` itself::

        buf.im2col ins(%x : memref<1x64x56x56xf32>) outs(%p : memref<196x576x16xf32>)
            {kernel = array<i64: 3, 3>, stride = array<i64: 1, 1>, padding = array<i64: 1, 1>,
             dilation = array<i64: 1, 1>, panels = 16 : i64}
    """

    name = "buf.im2col"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    kernel = prop_def(DenseArrayBase.constr(i64))
    stride = prop_def(DenseArrayBase.constr(i64))
    padding = prop_def(DenseArrayBase.constr(i64))
    dilation = prop_def(DenseArrayBase.constr(i64))
    pad_value = prop_def(FloatAttr, default_value=float_attr(0.0))
    panels = prop_def(IntegerAttr[i64], default_value=IntegerAttr(0, i64))
    #: "" (the windows), or "max" / "sum" / "mean": each window reduced, ``out [N, C, OH, OW]``
    #: (a pooling: `fuse-im2col-reduce`)
    reduce = prop_def(StringAttr, default_value=StringAttr(""))

    @property
    def window(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return tuple(tuple(a.get_values()) for a in (self.kernel, self.stride, self.padding, self.dilation))  # type: ignore[return-value]

    @property
    def panel_columns(self) -> int:
        """``NR`` of the panel layout, 0 for the plain one."""
        return self.panels.value.data

    @property
    def pairs(self) -> bool:
        """Panels of bf16 pairs along K (a bf16 output with ``panels``: the bf16 GEMM's rhs,
        ``[..., ceil(OH*OW / NR), ceil(K / 2), 2 NR]``, each value rounded to bf16, an odd K
        padded with a zero row)."""
        return self.panel_columns > 0 and isinstance(self.output.type.element_type, BFloat16Type)  # type: ignore[attr-defined]

    def positions(self, x: tuple[int, ...]) -> tuple[int, int]:
        """(OH, OW): the window positions along the height and width of an input ``x`` (torch's
        count: a plain layout may hold one more, ``ceil_mode``)."""
        return tuple(window_positions(size, k, s, p, d) for size, k, s, p, d in zip(x[2:], *self.window))  # type: ignore[return-value]

    def verify_kernel(self, ins, out):
        kernel = tuple(self.kernel.get_values())
        nr = self.panel_columns
        if nr < 0:
            raise ShapeError(f"panels must be >= 0 (0: the plain layout), got {nr}")
        if self.reduce.data:
            if self.reduce.data not in ("max", "sum", "mean") or nr:
                raise ShapeError(f"reduce must be max, sum or mean, without panels; got '{self.reduce.data}'")
            if len(ins[0]) != 4 or len(out) != 4 or tuple(out[:2]) != tuple(ins[0][:2]):
                raise ShapeError(f"expected x [N, C, H, W] -> [N, C, OH, OW], got {list(ins[0])} -> {list(out)}")
            return
        if nr == 0:
            if len(ins[0]) != 4 or len(out) != 6 or tuple(out[:4]) != (*ins[0][:2], *kernel):
                raise ShapeError(f"expected x [N, C, H, W] -> [N, C, KH, KW, OH, OW], got {list(ins[0])} -> {list(out)}")
            return
        if len(ins[0]) != 4:
            raise ShapeError(f"the panel layout takes images x [N, C, H, W], got {list(ins[0])}")
        oh, ow = self.positions(ins[0])
        k = ins[0][1] * kernel[0] * kernel[1]
        expected = (-(-(oh * ow) // nr), -(-k // 2), 2 * nr) if self.pairs else (-(-(oh * ow) // nr), k, nr)
        if self.pairs and self.inputs[0].type.element_type not in (f32, BFloat16Type()):  # type: ignore[attr-defined]
            raise ShapeError(f"panels of bf16 pairs take a float32 or bf16 input, got {self.inputs[0].type}")
        if len(out) == 4:  # one set of panels per image
            expected = (ins[0][0], *expected)
        elif ins[0][0] != 1:
            raise ShapeError(f"{ins[0][0]} images take one set of panels each, out [N, panels, K, NR], got {list(out)}")
        _same(expected, out, f"{oh}x{ow} windows of {ins[0][1]}x{kernel[0]}x{kernel[1]} values in panels of {nr}")


@irdl_op_definition
class WinogradInputOp(KernelOp):
    """The input transform of `tg.winograd_conv`, into the panels of its GEMMs:
    ins(x [N, C, H, W]) -> out [N*a*a, ceil(T / NR), C, NR] with ``a = tile + 2`` and T the
    ``ceil(OH / tile) x ceil(OW / tile)`` tiles (row-major) of each image, ``OH = H + 2 ph - 2``
    (N may be a size symbol)::

        out[n*a*a + xi, t // NR, c, t % NR] = (B^T d B)[xi]     d: the a x a input tile t of
                                                                 image n's channel c (zeros
                                                                 outside x), B: `dialects.winograd`

    The panels' padding columns (``t >= T``) hold finite values no output reads.

        buf.winograd_input ins(%x : memref<1x64x56x56xf32>) outs(%v : memref<16x49x64x16xf32>)
            {padding = array<i64: 1, 1>, tile = 2 : i64}
    """

    name = "buf.winograd_input"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    padding = prop_def(DenseArrayBase.constr(i64))
    tile = prop_def(IntegerAttr[i64], default_value=IntegerAttr(2, i64))

    def tiles(self, x: tuple[int, ...]) -> tuple[int, int]:
        """(tile rows, tiles per row) of an input ``x``."""
        m = self.tile.value.data
        ph, pw = self.padding.get_values()
        return -(-(x[2] + 2 * ph - 2) // m), -(-(x[3] + 2 * pw - 2) // m)

    def verify_kernel(self, ins, out):
        from tensor_graphs.dialects.winograd import TILES

        m = self.tile.value.data
        if m not in TILES:
            raise ShapeError(f"tile {m} is not one of {sorted(TILES)}")
        x = ins[0]
        pads = tuple(self.padding.get_values())
        if len(x) != 4 or len(pads) != 2 or min(pads) < 0 or min(x[2] + 2 * pads[0], x[3] + 2 * pads[1]) < 3:
            raise ShapeError(f"expected images x [N, C, H, W] at least 3x3 once padded by {list(pads)}, got {list(x)}")
        th, tw = self.tiles(x)
        xis = simplify(x[0] * (m + 2) ** 2)
        if len(out) != 4 or out[0] != xis or out[2] != x[1] or out[3] <= 0 or out[1] != -(-(th * tw) // out[3]):
            raise ShapeError(f"{th}x{tw} tiles of {x[1]} channels in panels of NR: expected [{format_expr(xis)}, ceil({th * tw} / NR), {x[1]}, NR], got {list(out)}")


@irdl_op_definition
class WinogradOutputOp(KernelOp):
    """The output transform of `tg.winograd_conv` with its epilogue: ins(gemms [N*a*a, Cout, T'],
    acc?) -> out [N, Cout, OH, OW], T' >= the ``ceil(OH / tile) x ceil(OW / tile)`` tiles of an
    image (N images, N may be a size symbol)::

        out[n, co, tile t's m x m outputs] = act(alpha * (A^T M A) + beta * acc)
                                              M[xi] = gemms[n*a*a + xi, co, t]

        buf.winograd_output ins(%m, %b : memref<16x64x784xf32>, memref<64x1x1xf32>) outs(%y : memref<1x64x56x56xf32>)
            {tile = 2 : i64, beta = 1.0 : f32, activation = "relu"}
    """

    name = "buf.winograd_output"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1, 2)
    tile = prop_def(IntegerAttr[i64], default_value=IntegerAttr(2, i64))
    alpha = prop_def(FloatAttr, default_value=float_attr(1.0))
    beta = prop_def(FloatAttr, default_value=float_attr(0.0))
    activation = prop_def(StringAttr, default_value=StringAttr("none"))

    @property
    def flags(self) -> tuple[float, float]:
        return self.alpha.value.data, self.beta.value.data

    def verify_kernel(self, ins, out):
        from tensor_graphs.dialects.winograd import TILES

        m = self.tile.value.data
        if m not in TILES:
            raise ShapeError(f"tile {m} is not one of {sorted(TILES)}")
        if len(out) != 4:
            raise ShapeError(f"the output must be images [N, Cout, OH, OW], got {list(out)}")
        tiles = -(-out[2] // m) * -(-out[3] // m)
        g = ins[0]
        xis = simplify(out[0] * (m + 2) ** 2)
        if len(g) != 3 or g[0] != xis or g[1] != out[1] or g[2] < tiles:
            raise ShapeError(f"expected the GEMMs' products [{format_expr(xis)}, {out[1]}, >= {tiles}], got {list(g)}")
        if len(ins) == 2 and not is_broadcastable_to(ins[1], out):
            raise ShapeError(f"accumulator {list(ins[1])} does not broadcast to {list(out)}")
        if self.activation.data not in ACTIVATIONS:
            raise ShapeError(f"unknown activation '{self.activation.data}'")
        if {v.type.element_type for v in (*self.inputs, self.output)} != {f32}:  # type: ignore[attr-defined]
            raise ShapeError("only f32 buffers are supported")


@irdl_op_definition
class PackedEmbeddingOp(KernelOp):
    """Row gather from a table packed into column panels: ins(table, indices) -> out [..., D].

    ``table`` is the `buf.packed_weight` of a ``{transposed}`` ``[rows, D]`` weight (a tied LM
    head's embedding), ``[ceil(rows / NR), D, NR]``: row ``j`` is column ``j % NR`` of panel
    ``j // NR``, its D elements ``NR`` floats apart. Reading it here spares binding the table
    a second time, as it is stored.
    """

    name = "buf.packed_embedding"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (2,)
    rows = prop_def(IntegerAttr[i64])

    def verify_kernel(self, ins, out):
        rows = self.rows.value.data
        if len(ins[0]) != 3:
            raise ShapeError(f"the packed table must be [panels, D, NR], got {list(ins[0])}")
        panels, d, nr = ins[0]
        if rows < 0 or nr <= 0 or -(-rows // nr) != panels:
            raise ShapeError(f"{rows} rows need {-(-rows // max(nr, 1))} panels of {nr}, the table has {panels}")
        _same((*ins[1], d), out, "indices shape + row size")


@irdl_op_definition
class SliceOp(KernelOp):
    """Copies ``x[..., start : start + step * size : step, ...]`` along ``dim`` (strided slices)."""

    name = "buf.slice"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    dim = prop_def(IntegerAttr[i64])
    start = prop_def(IntegerAttr[i64])
    step = prop_def(IntegerAttr[i64], default_value=IntegerAttr(1, i64))

    def verify_kernel(self, ins, out):
        dim, start, step = self.dim.value.data, self.start.value.data, self.step.value.data
        a = ins[0]
        if not 0 <= dim < len(a) or len(a) != len(out):
            raise ShapeError(f"dim {dim} out of range or rank mismatch ({list(a)} -> {list(out)})")
        if any(x != y for i, (x, y) in enumerate(zip(a, out)) if i != dim):
            raise ShapeError(f"output {list(out)} may differ from the input {list(a)} only in dim {dim}")
        if out[dim] and not (0 <= start and start + step * (out[dim] - 1) < a[dim]):
            raise ShapeError(f"slice [{start}::{step}] of size {out[dim]} is out of bounds for {a[dim]}")


@irdl_op_definition
class ConcatOp(KernelOp):
    """Concatenation along ``dim``."""

    name = "buf.concat"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = tuple(range(1, 65))
    dim = prop_def(IntegerAttr[i64])

    def verify_kernel(self, ins, out):
        dim = self.dim.value.data
        if not 0 <= dim < len(out):
            raise ShapeError(f"dim {dim} out of range for rank {len(out)}")
        for s_ in ins:
            if len(s_) != len(out) or any(x != y for i, (x, y) in enumerate(zip(s_, out)) if i != dim):
                raise ShapeError(f"input {list(s_)} does not match the output {list(out)} outside dim {dim}")
        if sum(s_[dim] for s_ in ins) != out[dim]:
            raise ShapeError(f"sizes along dim {dim} do not add up to {out[dim]}")


@irdl_op_definition
class BroadcastOp(KernelOp):
    """Materialises the broadcast of the input to the output shape."""

    name = "buf.broadcast"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)

    def verify_kernel(self, ins, out):
        if not is_broadcastable_to(ins[0], out):
            raise ShapeError(f"{list(ins[0])} does not broadcast to {list(out)}")


@irdl_op_definition
class AttentionOp(AttentionLayout, KernelOp):
    """Tiled attention (online softmax): ins(q, k, v[, mask]) outs(out[, scratch]).

    Shapes and flags as `tg.attention` (``q_seq_major`` ...: that buffer is stored
    ``[..., S, H, D]``); the optional second output is the kernel's scratch buffer (planned like
    any buffer, live for this op only). With ``bf16_products`` its two GEMMs take bf16 operands
    (``q * scale``, k, the probabilities and v rounded to nearest even), float32 sums
    (`kernels_attention`; the scratch's layout: `scratch.AttentionTiles.pairs`).
    """

    name = "buf.attention"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (3, 4)
    NUM_OUTPUTS: ClassVar[tuple[int, ...]] = (1, 2)
    scale = prop_def(FloatAttr)
    causal = prop_def(BoolAttr, default_value=bool_attr(False))
    #: k and v are caches: only their first ``past + Sq`` positions are keys (``past`` = dims[0]);
    #: a mask indexes the cache's positions (a key-padding mask: [B, 1, 1, Sk])
    kv_cache = prop_def(BoolAttr, default_value=bool_attr(False))
    q_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    k_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    v_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    out_seq_major = prop_def(BoolAttr, default_value=bool_attr(False))
    q_heads = opt_prop_def(DenseArrayBase.constr(i64))
    k_heads = opt_prop_def(DenseArrayBase.constr(i64))
    v_heads = opt_prop_def(DenseArrayBase.constr(i64))
    bf16_products = prop_def(BoolAttr, default_value=bool_attr(False))

    def _layout_values(self) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue]:
        return (*self.inputs[:3], self.output)  # type: ignore[return-value]

    def verify_kernel(self, ins, out):
        flags = self.seq_major  # (a rank below 3 is left as it is, rejected below)
        if not (len(ins[0]) >= 3 and len(ins[1]) == len(ins[0]) == len(ins[2])):
            raise ShapeError(f"q, k, v need the same rank >= 3, got {list(ins[0])}, {list(ins[1])}, {list(ins[2])}")
        try:
            check_head_ranges(ins[:3], flags, self.head_ranges, self.name)
        except VerifyException as e:
            raise ShapeError(str(e).removeprefix(f"{self.name}: ")) from None
        q, k, v, out = attention_shapes((*ins[:3], out), flags, self.head_ranges)
        if q[-1] != k[-1] or k[-2] != v[-2] or k[:-2] != v[:-2] or q[:-3] != k[:-3] or q[-3] % max(k[-3], 1):
            raise ShapeError(f"incompatible q {list(q)}, k {list(k)}, v {list(v)}")
        _same((*q[:-1], v[-1]), out, "q rows x v columns")
        if len(ins) == 4 and not is_broadcastable_to(ins[3], (*q[:-1], k[-2])):
            raise ShapeError(f"mask {list(ins[3])} does not broadcast to the scores {list((*q[:-1], k[-2]))}")
        if self.kv_cache.value.data:
            if not self.causal.value.data and q[-2] != 1:
                raise ShapeError("kv_cache attention with more than one query must be causal")
            if not at_most(q[-2], k[-2], self):
                raise ShapeError(f"{q[-2]} queries do not fit a cache of {k[-2]} positions")
            if any(flags[1:3]):
                raise ShapeError("a KV cache is heads-major (no k_seq_major, v_seq_major)")
            if self.head_ranges[1:] != (None, None):
                raise ShapeError("a KV cache is read whole (no k_heads, v_heads)")


@irdl_op_definition
class CacheWriteOp(KernelOp):
    """ins(update) outs(state): copies ``update`` into ``state`` along ``axis`` at positions
    ``[past, past + n)``, ``past`` being the graph's run-time position (``dims[0]``); the generated
    code fails with a status when ``past + n`` exceeds the state's size along ``axis``."""

    name = "buf.cache_write"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (1,)
    axis = prop_def(IntegerAttr[i64])

    def verify_kernel(self, ins, out):
        u, axis = ins[0], self.axis.value.data
        if len(u) != len(out) or not 0 <= axis < len(out):
            raise ShapeError(f"axis {axis} / rank mismatch ({list(u)} into {list(out)})")
        if any(a != b for i, (a, b) in enumerate(zip(u, out)) if i != axis) or not at_most(u[axis], out[axis], self):
            raise ShapeError(f"update {list(u)} does not fit state {list(out)} along axis {axis}")


@irdl_op_definition
class RopeOp(KernelOp):
    """Rotary embedding (rotate-half form, see `tg.rope`): ins(x, cos, sin[, norm]) outs(out);
    with ``norm`` (a [D] weight) and ``eps``, the rows of x RMS-normalised first."""

    name = "buf.rope"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = (3, 4)
    eps = opt_prop_def(FloatAttr)

    def verify_kernel(self, ins, out):
        _same(ins[0], out, "same as the input")
        if out and out[-1] % 2:
            raise ShapeError(f"the last dim {out[-1]} must be even")
        if (len(ins) == 4) != (self.eps is not None):
            raise ShapeError("a norm weight and eps go together")
        if len(ins) == 4 and tuple(ins[3]) != tuple(out[-1:]):
            raise ShapeError(f"norm weight {list(ins[3])} should be {list(out[-1:])}")
        for s_ in ins[1:3]:
            if not is_broadcastable_to(s_, out):
                raise ShapeError(f"cos/sin {list(s_)} does not broadcast to {list(out)}")


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminates the scalar body of `buf.fused_elementwise`."""

    name = "buf.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class FusedElementwiseOp(KernelOp):
    """One loop over the output; the body (as in `tg.fused_elementwise`) computes each element."""

    name = "buf.fused_elementwise"
    NUM_INPUTS: ClassVar[tuple[int, ...]] = tuple(range(0, 65))
    body = region_def("single_block")
    assembly_format = (
        "`ins` `(` $inputs `:` type($inputs) `)` `outs` `(` $outputs `:` type($outputs) `)` attr-dict-with-keyword $body"
    )

    def __init__(self, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue], body: Region):
        IRDLOperation.__init__(self, operands=[list(inputs), list(outputs)], regions=[body])

    def verify_kernel(self, ins, out):
        _same(broadcast_shapes(*ins) if ins else (), out, "broadcast of the inputs")
        block = self.body.block
        if len(block.args) != len(ins):
            raise ShapeError(f"the body takes {len(block.args)} arguments for {len(ins)} inputs")
        term = block.last_op
        if not isinstance(term, YieldOp) or len(term.values) != 1:
            raise ShapeError("the body must end with one buf.yield value")


BUF = Dialect(
    "buf",
    [
        ArenaOp,
        IotaOp,
        SizeOp,
        AllocOp,
        ViewOp,
        WeightOp,
        PackedWeightOp,
        StateOp,
        ConstantOp,
        ReshapeOp,
        MatmulOp,
        PackedMatmulOp,
        QuantizeRowsOp,
        QuantizedMatvecOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        ReluOp,
        CopyOp,
        TransposeOp,
        BiasActivationOp,
        UnaryOp,
        BinaryOp,
        SelectOp,
        CastOp,
        CheckNonzeroOp,
        ReduceOp,
        ArgReduceOp,
        CumsumOp,
        ArgTopkOp,
        PutOp,
        LapackOp,
        GroupedMatmulOp,
        PackedGroupedMatmulOp,
        SoftmaxOp,
        LayerNormOp,
        RmsNormOp,
        EmbeddingOp,
        TakeOp,
        Im2colOp,
        WinogradInputOp,
        WinogradOutputOp,
        PackedEmbeddingOp,
        SliceOp,
        ConcatOp,
        BroadcastOp,
        AttentionOp,
        CacheWriteOp,
        RopeOp,
        FusedElementwiseOp,
        YieldOp,
        SubviewOp,
    ],
)
