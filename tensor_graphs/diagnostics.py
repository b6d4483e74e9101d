"""IR text in, one clear line out: parse with source locations, verify, format errors.

    try:
        module = parse_module(text_or_bytes, "model.mlir")   # ops carry loc("model.mlir":line:col)
        verify_module(module)                                # every op's verifier + SSA dominance
    except IRError as e:
        print(e)                                             # model.mlir:3:8: error: ...

What the tools (`tg-opt`, `tg-run`) and `compile_module` share, so that bad input of any kind
(text that is not UTF-8, a syntax error, an unknown op, a value used before it is defined, a
verifier failure, nesting too deep for the parser) becomes ONE line naming the file, line and
column where there is one, never a Python traceback.

Dominance (what xDSL's verifier does not check): in a function body, a value must be defined
before it is used, by an op of the same block that comes earlier, by an enclosing block, or by
a block that dominates the user's block. The parser resolves forward references silently (it
allows them for graph regions), so without this a module using ``%y`` before ``%y = ...`` would
pass ``canonicalize`` and fail later with a ``KeyError`` in a lowering. The body of a
``builtin.module`` is a graph region (MLIR's ``RegionKind::Graph``): no order is required there.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import sys
from collections.abc import Iterator

from xdsl.context import Context
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr
from xdsl.ir import Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException


class IRError(DiagnosticException):
    """Bad IR with where it is: ``str()`` is one line ``file:line:col: error: message`` (or
    ``file: error: message`` / ``error: message`` when there is no position)."""

    def __init__(self, message: str, location: str | None = None):
        self.message = message
        self.location = location
        super().__init__(f"{location}: error: {message}" if location else f"error: {message}")


class LocatedParser(Parser):
    """xDSL's parser, recording each op's position in the text as its ``location``
    (``loc("file":line:col)``, printed with ``--print-debuginfo``) unless the text gives one.

    Positions come from an index of the text's line starts, made once (xDSL's own
    ``Span.get_location`` counts the newlines from the start of the text for every op, which made
    parsing quadratic in the size of the file: 5 MB of ops took 71 s)."""

    def __init__(self, ctx: Context, text: str, name: str, line_offset: int = 0):
        super().__init__(ctx, text, name)
        #: lines before this text in its file (a chunk of ``--split-input-file``)
        self.line_offset = line_offset
        self._name = StringAttr(name)
        #: the offset of each line's first character
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        op = super().parse_operation()
        if not isinstance(op.location, FileLineColLoc):
            line = bisect.bisect_right(self._line_starts, start)  # 1-based
            column = start - self._line_starts[line - 1] + 1
            op.location = FileLineColLoc(self._name, IntAttr(line + self.line_offset), IntAttr(column))
        return op


def decode(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text, or an `IRError` at the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        what = "binary data" if b"\0" in data[:4096] else "text in another encoding"
        raise IRError(f"not UTF-8 text (byte 0x{data[e.start]:02x}): this looks like {what}, not MLIR", f"{name}:{line}:{col}") from None


def parse_module(
    source: str | bytes, name: str, ctx: Context | None = None, *, implicit_module: bool = True, line_offset: int = 0
) -> ModuleOp:
    """Parse MLIR text into a module whose ops know their position in ``name``; any failure
    (not UTF-8, syntax, unknown op, undefined or duplicate value, too deeply nested) raises
    `IRError` (one line). ``line_offset``: lines of the file before ``source``."""
    from tensor_graphs.context import make_context

    text = decode(source, name) if isinstance(source, bytes) else source
    if not text.strip():
        raise IRError("the input is empty: expected an MLIR module", f"{name}:{line_offset + 1}:1")
    try:
        return LocatedParser(ctx if ctx is not None else make_context(), text, name, line_offset).parse_module(implicit_module)
    except ParseError as e:
        e.span = dataclasses.replace(e.span, line_offset=line_offset)
        raise from_parse_error(e) from None
    except RecursionError:
        raise IRError(f"the input is nested too deeply for the parser (Python's recursion limit, {sys.getrecursionlimit()})", name) from None


def from_parse_error(e: ParseError) -> IRError:
    """A parse error as one line at its position (xDSL's own message has the source line and a caret)."""
    message = " ".join(e.msg.split())
    span = e.span
    where = str(span.get_location())
    content = span.input.content
    if (undefined := _UNDEFINED.match(message)) is not None:
        names = [n.strip() for n in undefined.group(1).split(",")]
        first = re.search(re.escape(names[0]) + r"\b", content) if isinstance(content, str) else None
        if first is not None:
            where = str(dataclasses.replace(span, start=first.start(), end=first.end()).get_location())
        return IRError(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} used but never defined", where)
    if span.start >= len(content.rstrip()):
        message = f"unexpected end of input ({message}): is the file truncated? (an unclosed '{{' or a missing terminator)"
    elif (unknown := _UNREGISTERED.match(message)) is not None:
        message += _unknown_op_hint(unknown.group(1))
    return IRError(message, where)


_UNREGISTERED = re.compile(r"Operation (\S+) is not registered")
_UNDEFINED = re.compile(r"values used but not defined: \[(.*)\]")


def _unknown_op_hint(name: str) -> str:
    from tensor_graphs.context import DIALECTS

    dialect = name.split(".")[0]
    if dialect in DIALECTS:
        return f": dialect '{dialect}' has no op '{name}'"
    return f": there is no dialect '{dialect}' (tensor_graphs reads {', '.join(sorted(DIALECTS))})"


# --------------------------------------------------------------------------- verification


def location_of(op: Operation | None) -> str | None:
    """``file:line:col`` of ``op`` (or of its closest enclosing op that has one), else None."""
    while op is not None:
        if isinstance(op.location, FileLineColLoc):
            loc = op.location
            return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
        op = op.parent_op()
    return None


def describe(op: Operation) -> str:
    """``'tg.add' op (%y)``: how an error names an op."""
    names = ", ".join(f"%{r.name_hint}" for r in op.results if r.name_hint)
    return f"'{op.name}' op" + (f" ({names})" if names else "")


def verify_module(module: ModuleOp, *, after: str | None = None) -> None:
    """Check ``module``: SSA dominance, then every op's own verifier. The first failure raises
    `IRError` naming the op and its position; ``after``: the pass that just ran (its output
    failing is a defect of that pass, and the message says so)."""
    try:
        check_dominance(module)
        check_kernel_parameters(module)
        try:
            module.verify()
        except VerifyException as e:
            op = _first_failing_op(module)
            message = " ".join(str(e).split("\n\n")[0].split())
            raise IRError(f"{describe(op)}: {message}" if op is not None else message, location_of(op)) from None
    except IRError as e:
        if after is None:
            raise
        raise IRError(f"the module does not verify after pass '{after}' (a bug in that pass): {e.message}", e.location) from None


def check_kernel_parameters(module: ModuleOp) -> None:
    """Every kernel parameter an op pins (``tg.chunks``, ``tg.threads``, ``tg.k_block``, ...: a
    tuner's choices, `lowering.tensor_to_buffer.kernels.PARAMETER_ATTRS` and the GPU's) is an
    integer the kernel can use: at least 1 (``tg.separate_epilogue``: 0 or 1); else `IRError`.
    Checked here because a kernel reads some only when it runs on several threads."""
    from xdsl.dialects.builtin import IntegerAttr

    from tensor_graphs.lowering.tensor_to_buffer.kernels import GPU_PARAMETER_ATTRS, PARAMETER_ATTRS

    names = {*PARAMETER_ATTRS.values(), *GPU_PARAMETER_ATTRS.values()}
    flag = PARAMETER_ATTRS["separate_epilogue"]
    for op in module.walk():
        for name in names.intersection(op.attributes):
            value = op.attributes[name]
            ok = isinstance(value, IntegerAttr) and (value.value.data in (0, 1) if name == flag else value.value.data >= 1)
            if not ok:
                want = "0 or 1" if name == flag else "a positive integer"
                raise IRError(f"{describe(op)}: {name} must be {want}, got {value}", location_of(op))


def _first_failing_op(module: ModuleOp) -> Operation | None:
    """The innermost op whose own verifier fails (xDSL's exception does not name it)."""
    failing = None
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException:
            failing = op
            if not op.regions:
                return op
    return failing


def check_dominance(module: ModuleOp) -> None:
    """Every operand is defined before its use (see the module docstring); else `IRError`."""
    order: dict[Block, dict[Operation, int]] = {}
    dominance: dict[Region, DominanceInfo] = {}
    for op in module.walk():
        for index, operand in enumerate(op.operands):
            if (reason := _why_not_dominated(operand, op, order, dominance)) is not None:
                raise IRError(f"{describe(op)}: operand #{index} {_value_name(operand)} {reason}", location_of(op))


def _value_name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "(unnamed)"


def _ancestors(op: Operation) -> Iterator[Operation]:
    while op is not None:
        yield op
        op = op.parent_op()  # type: ignore[assignment]


def _why_not_dominated(value: SSAValue, user: Operation, order, dominance) -> str | None:
    if isinstance(value, OpResult):
        definer: Operation | None = value.op
        block = definer.parent_block()
        if block is None:
            return f"is the result of '{definer.name}', which is not in the module (erased or never inserted)"
    elif isinstance(value, BlockArgument):
        block, definer = value.block, None
    else:  # pragma: no cover - every SSA value is one of the two
        return None
    region = block.parent
    if region is not None and isinstance(region.parent, ModuleOp):
        return None  # a graph region: no order
    # the user, or the op enclosing it, that sits in a block of the defining block's region
    for anchor in _ancestors(user):
        anchor_block = anchor.parent_block()
        if anchor_block is None or anchor_block.parent is not region:
            continue
        if anchor_block is block:
            if definer is None:
                return None
            positions = order.get(block)
            if positions is None:
                positions = order[block] = {o: i for i, o in enumerate(block.ops)}
            if anchor is definer:
                return "is used by the op that defines it"
            if positions[definer] < positions[anchor]:
                return None
            return f"is used before it is defined ({_defined_by(definer)})"
        info = dominance.get(region)
        if info is None:
            info = dominance[region] = DominanceInfo(region)
        if info.dominates(block, anchor_block):
            return None
        return f"is {_defined_by(definer)} in a block that does not dominate this use"
    return f"is {_defined_by(definer)} in a region that does not enclose this use"


def _defined_by(definer: Operation | None) -> str:
    if definer is None:
        return "a block argument"
    return f"defined by '{definer.name}'" + (f" at {loc}" if (loc := location_of(definer)) else "")
