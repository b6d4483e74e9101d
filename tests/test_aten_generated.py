"""The checked-in aten dialect is what the generator makes from the installed torch's schemas."""

import subprocess
import sys

from tensor_graphs.tools import gen_aten_dialect


def test_checked_in_aten_dialect_is_up_to_date():
    expected = gen_aten_dialect.generate()
    current = gen_aten_dialect.OUTPUT.read_text()
    assert current == expected, "tensor_graphs/dialects/aten.py is stale: run python -m tensor_graphs.tools.gen_aten_dialect"


def test_every_spec_is_in_the_dialect():
    from tensor_graphs.dialects.aten import ATEN, ATEN_OPS

    names = {op.name for op in ATEN.operations}
    assert "aten.unsupported" in names
    for spec in gen_aten_dialect.OPS:
        assert spec.op_name in names
    assert ATEN_OPS["aten::add.Tensor"].name == "aten.add.Tensor"
    assert ATEN_OPS["aten::linear"].name == "aten.linear"


def test_generated_dialect_does_not_import_torch():
    code = "import sys; import tensor_graphs.dialects.aten; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
