"""Shape rules shared by the `tg` and `buf` verifiers, the frontend and the lowerings.

Every function raises :class:`ShapeError` with a sentence a user can act on; verifiers wrap
it into a ``VerifyException`` so that ``--verify-diagnostics`` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence


class ShapeError(ValueError):
    """A shape rule was broken; the message says which and how."""


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of ``shapes``: right-aligned, each dim equal or 1."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(-rank, 0):
        dims = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(dims) > 1:
            raise ShapeError(
                "shapes "
                + ", ".join(str(list(s)) for s in shapes)
                + f" do not broadcast: dim {axis} has sizes {sorted(dims, key=str)}"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def is_broadcastable_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """True when ``shape`` broadcasts to exactly ``target``."""
    try:
        return broadcast_shapes(shape, target) == tuple(target)
    except ShapeError:
        return False


def matmul_shape(
    a: Sequence[int], b: Sequence[int], transpose_a: bool = False, transpose_b: bool = False
) -> tuple[int, ...]:
    """Result shape of a batched matmul ``op(a) @ op(b)`` with broadcast batch dims.

    Both operands have rank >= 2; ``op(x)`` swaps the last two dims when its flag is set.
    """
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul operands need rank >= 2, got {list(a)} and {list(b)}")
    m, k = (a[-1], a[-2]) if transpose_a else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if transpose_b else (b[-2], b[-1])
    if k != k2:
        raise ShapeError(
            f"matmul contraction dims differ: lhs {list(a)} (transpose_a={transpose_a}) "
            f"has K={k}, rhs {list(b)} (transpose_b={transpose_b}) has K={k2}"
        )
    batch = broadcast_shapes(a[:-2], b[:-2])
    return (*batch, m, n)


def permute_shape(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    """``shape`` permuted by ``perm``; ``perm`` must be a permutation of ``range(rank)``."""
    if sorted(perm) != list(range(len(shape))):
        raise ShapeError(f"perm {list(perm)} is not a permutation of the {len(shape)} dims of {list(shape)}")
    return tuple(shape[p] for p in perm)


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return tuple(strides)


def broadcast_strides(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """Element strides to read a contiguous ``shape`` as if it had shape ``target`` (0 where broadcast)."""
    own = contiguous_strides(shape)
    pad = len(target) - len(shape)
    return tuple(
        0 if i < pad or shape[i - pad] == 1 and target[i] != 1 else own[i - pad]
        for i in range(len(target))
    )


#: the attention operands that may be stored sequence-major, in order: `attention` ops' flags
#: ``q_seq_major``, ``k_seq_major``, ``v_seq_major``, ``out_seq_major``
ATTENTION_OPERANDS: tuple[str, ...] = ("q", "k", "v", "out")


def heads_major(shape: Sequence[int], seq_major: bool) -> tuple[int, ...]:
    """An attention operand's shape in the order the op computes in, ``[..., H, S, D]``: ``shape``
    itself, or, stored sequence-major (``[..., S, H, D]``: a projection's output before the
    transpose that PyTorch models apply), with its dims -3 and -2 swapped."""
    s = tuple(shape)
    return (*s[:-3], s[-2], s[-3], s[-1]) if seq_major and len(s) >= 3 else s


def attention_operand_strides(stored: Sequence[int], seq_major: bool, first_head: int = 0) -> tuple[int, int, int, int]:
    """(batch stride, head stride, position stride, offset of the first head read) in elements of
    a contiguous attention operand of ``stored`` shape (``[..., H', S, D]``, or sequence-major
    ``[..., S, H', D]``) of which the op reads heads ``first_head ...`` (a head range: the
    buffer holds more heads than the op reads, e.g. q, k and v side by side): its contiguous
    strides, the heads' and the positions' swapped when sequence-major."""
    a, b, d = stored[-3:]
    head, pos = (d, b * d) if seq_major else (b * d, d)
    return a * b * d, head, pos, first_head * head


def window_positions(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool = False) -> int:
    """How many positions a window of ``kernel`` taps (``dilation`` apart) takes along a dim of
    ``size`` padded by ``padding`` on both sides, moving by ``stride`` (torch's rule for
    convolution and pooling; ``ceil_mode`` counts a last partial window that starts inside the
    input or its left padding)."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    if span < 0:
        raise ShapeError(f"a window of {kernel} taps (dilation {dilation}) does not fit a dim of {size} padded by {padding}")
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + padding:
        out -= 1
    return out
