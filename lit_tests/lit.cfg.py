# lit configuration: every *.mlir file here is a test; RUN lines call tg-opt and filecheck
# from the same environment that runs lit.
import os
import sys

import lit.formats

config.name = "tensor_graphs"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
