"""``convert-aten-to-tensor``: the aten dialect → the tg dialect.

One thin pass wiring together the per-family pattern files (``linear``, ``convolution``, ``resize``, ``elementwise``,
``math_functions``, ``views``, ``nn``,
``comparisons``, ``data_movement``, ``take``, ``indexing``, ``reductions``, ``normalization``, ``attention``, ``masks``).
Patterns that cannot apply leave their op alone and say why; at the end every aten op still
present (``aten.unsupported`` included) is reported in one error. The mask builders (``masks``)
have no lowering: ``constant-fold`` evaluates them before this pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker, RewritePattern
from xdsl.utils.exceptions import PassFailedException

from tensor_graphs.diagnostics import location_of
from tensor_graphs.lowering.aten_to_tensor.attention import populate_attention_patterns
from tensor_graphs.lowering.aten_to_tensor.common import MATCH_FAILURES
from tensor_graphs.lowering.aten_to_tensor.comparisons import populate_comparison_patterns
from tensor_graphs.lowering.aten_to_tensor.convolution import populate_convolution_patterns
from tensor_graphs.lowering.aten_to_tensor.data_movement import populate_data_movement_patterns
from tensor_graphs.lowering.aten_to_tensor.elementwise import populate_elementwise_patterns
from tensor_graphs.lowering.aten_to_tensor.indexing import populate_indexing_patterns
from tensor_graphs.lowering.aten_to_tensor.linalg import populate_linalg_patterns
from tensor_graphs.lowering.aten_to_tensor.linear import populate_linear_patterns
from tensor_graphs.lowering.aten_to_tensor.masks import populate_mask_patterns
from tensor_graphs.lowering.aten_to_tensor.math_functions import populate_math_function_patterns
from tensor_graphs.lowering.aten_to_tensor.moe import populate_moe_patterns
from tensor_graphs.lowering.aten_to_tensor.nn import populate_nn_patterns
from tensor_graphs.lowering.aten_to_tensor.normalization import populate_normalization_patterns
from tensor_graphs.lowering.aten_to_tensor.reductions import populate_reduction_patterns
from tensor_graphs.lowering.aten_to_tensor.resize import populate_resize_patterns
from tensor_graphs.lowering.aten_to_tensor.take import populate_take_patterns
from tensor_graphs.lowering.aten_to_tensor.views import populate_view_patterns


#: what to do about an ATen op that has no lowering (also the frontend's advice)
UNSUPPORTED_OP_FIX = "write it with supported ops (tensor_graphs/dialects/aten.py lists them) or compute it outside the model"


class AtenConversionError(PassFailedException, ValueError):
    """Some aten ops are left after ``convert-aten-to-tensor``; the message lists each with its
    operand types, its place in the model and its reason (a ValueError: bad input, not a defect)."""


def _operand_types(op) -> str:
    """`` (float32 [2, 3], int64 [2])``: what the op was given, dtype first (torch's name, from
    the one dtype table: bfloat16 is not NumPy's float32 that holds it)."""
    from tensor_graphs import dtypes
    from tensor_graphs.dialects.symbolic import dims_of, format_expr

    def one(t) -> str:
        element = getattr(t, "element_type", t)
        name = dtypes.of_element(element).name if dtypes.holds_element(element) else str(element)
        if not hasattr(t, "get_shape"):
            return str(t)
        return f"{name} [{', '.join(format_expr(d) for d in dims_of(t))}]"  # a symbolic dim by its expression

    types = [one(v.type) for v in op.operands]
    return f" ({', '.join(types)})" if types else ""


def populate_aten_to_tensor_patterns() -> list[RewritePattern]:
    return [
        *populate_linear_patterns(),
        *populate_convolution_patterns(),
        *populate_nn_patterns(),
        *populate_resize_patterns(),
        *populate_elementwise_patterns(),
        *populate_math_function_patterns(),
        *populate_comparison_patterns(),
        *populate_data_movement_patterns(),
        *populate_indexing_patterns(),
        *populate_take_patterns(),
        *populate_view_patterns(),
        *populate_moe_patterns(),
        *populate_reduction_patterns(),
        *populate_linalg_patterns(),
        *populate_normalization_patterns(),
        *populate_attention_patterns(),
        *populate_mask_patterns(),
    ]


@dataclass(frozen=True)
class ConvertAtenToTensorPass(ModulePass):
    name = "convert-aten-to-tensor"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        failures: dict = {}
        token = MATCH_FAILURES.set(failures)
        try:
            walker = PatternRewriteWalker(GreedyRewritePatternApplier(populate_aten_to_tensor_patterns(), dce_enabled=False))
            walker.rewrite_module(op)
        finally:
            MATCH_FAILURES.reset(token)
        left = [o for o in op.walk() if o.dialect_name() == "aten"]
        if not left:
            return
        lines = []
        for o in left:
            if o.name == "aten.unsupported":
                target = o.properties["target"].data  # type: ignore[attr-defined]
                where = o.properties.get("location")
                loc = where.data if where is not None else ""  # type: ignore[attr-defined]
                lines.append(f"  {target} has no tg lowering (unsupported ATen op){f' at {loc}' if loc else ''}; {UNSUPPORTED_OP_FIX}")
            else:
                reason = failures.get(id(o), (None, "no pattern matched"))[1]
                lines.append(f"  {o.name}{_operand_types(o)}{f' at {loc}' if (loc := location_of(o)) else ''}: {reason}")
        raise AtenConversionError(
            f"convert-aten-to-tensor: {len(left)} aten op{'s' if len(left) != 1 else ''} could not be converted:\n"
            + "\n".join(lines)
        )
