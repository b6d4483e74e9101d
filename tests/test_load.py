"""``tg.load``: a module ``tg.export`` wrote, compiled with its weights memory-mapped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensor_graphs as tg
from tensor_graphs.frontend.weights import map_safetensors
from test_zoo import ZOO, inputs


def test_load_matches_the_model_and_maps_the_weights(tmp_path):
    torch.manual_seed(0)
    model = ZOO["bert"].build().eval()
    ids, mask = inputs("encoder", 0)
    tg.export(model, (ids, mask), tmp_path / "bert.mlir")
    for pack in (True, False):
        fn = tg.load(tmp_path / "bert.mlir", pack_weights=pack)
        for seed in (0, 1):
            ids, mask = inputs("encoder", seed)
            with torch.no_grad():
                expected = model(ids, mask)
            assert (fn(ids, mask) - expected).abs().max().item() <= 1e-5
    weights = map_safetensors(tmp_path / "bert.safetensors")
    w = weights["model.embeddings.word_embeddings.weight"]
    assert isinstance(w.base, np.memmap) or isinstance(getattr(w.base, "base", None), np.memmap)
    assert not w.flags.writeable  # read-only: the file is never written through
    np.testing.assert_array_equal(w, model.model.embeddings.word_embeddings.weight.detach().numpy())


def test_map_safetensors_refuses_what_is_not_one(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00nope!")
    with pytest.raises(ValueError, match="not a safetensors file"):
        map_safetensors(bad)
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01")
    with pytest.raises(ValueError, match="shorter than its header length"):
        map_safetensors(short)
