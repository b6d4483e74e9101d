"""The options of a compile, in one place: `CompileOptions` (every graph) and `DecoderOptions`
(what `compile_decoder` adds). The public functions (`tensor_graphs.compile`,
`compile_module`, `compile_decoder`, `load`, `tune`) take these as keywords and hand one
object down to the driver (`tensor_graphs.driver`), the tuner and the decoder assembly."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tensor_graphs.target import Target

@dataclass(frozen=True)
class CompileOptions:
    """How a graph is compiled.

    ``keep_ir``: keep the text of every level for ``fn.ir(level)``. ``profile``: time every
    kernel call (``fn.profile(...)``). ``pack_weights``: GEMMs by a weight read a copy packed
    into column panels when the graph is loaded (``False``: the weights where they are, through
    BLAS). ``target``: the machine (`tensor_graphs.target`: a `Target` or a name such as
    ``"x86-64-v3"``; default ``TG_TARGET``, else this CPU). ``tolerance``, ``tune``,
    ``tuning_db``, ``max_tuning_seconds``: the kernel paths (`tensor_graphs.tuning`).
    ``device``: ``"cpu"`` or ``"cuda"`` (Triton kernels on an NVIDIA GPU)."""

    keep_ir: bool = True
    profile: bool = False
    pack_weights: bool = True
    target: Target | str | None = None
    tolerance: float = 1e-5
    tune: str = "off"
    tuning_db: object | None = None
    max_tuning_seconds: float | None = None
    device: str = "cpu"

    def but(self, **changes) -> CompileOptions:
        """A copy with ``changes``."""
        return replace(self, **changes)

    @property
    def tuned(self) -> bool:
        """Whether kernel paths come from the timing database (``tune`` is not ``"off"``)."""
        return self.tune != "off"


@dataclass(frozen=True)
class DecoderOptions:
    """What a decoder adds (`compile_decoder`): the KV cache's ``max_seq`` positions (None: the
    model's maximum), the ``batch``, the most tokens of a prefill call ``prefill_chunk`` (None: the
    default, `decoder_assembly.prefill_chunk`), the key
    ``padding`` mask (None: when ``batch > 1``) and the matrix-vector products' ``weight_format``
    (None, ``"bf16"``, ``"int8"``, ``"bf16dot"``)."""

    max_seq: int | None = None
    batch: int = 1
    prefill_chunk: int | None = None
    padding: bool | None = None
    weight_format: str | None = None
