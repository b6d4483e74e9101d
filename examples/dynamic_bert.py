"""One BERT-base graph for every sequence length (docs/dynamic-shapes.md): compile once with a
``torch.export.Dim``, run at three lengths against eager, print the memory at each, and the
error for a length out of range.

    .venv/bin/python examples/dynamic_bert.py
"""

import torch
from torch.export import Dim
from transformers import BertConfig, BertModel

import tensor_graphs as tg


class Encoder(torch.nn.Module):
    """ids -> last hidden state."""

    def __init__(self):
        super().__init__()
        self.bert = BertModel(BertConfig()).eval()  # BERT-base, random weights

    def forward(self, ids):
        return self.bert(input_ids=ids).last_hidden_state


def main() -> None:
    torch.manual_seed(0)
    model = Encoder()
    seq = Dim("seq", min=1, max=512)
    fn = tg.compile(model, (torch.randint(0, 30522, (1, 128)),), dynamic_shapes={"ids": {1: seq}})
    with torch.no_grad():
        for n in (16, 128, 512):
            ids = torch.randint(0, 30522, (1, n))
            torch.testing.assert_close(fn(ids), model(ids), rtol=1e-5, atol=1e-5)
    print(fn)
    for n in (16, 128, 512):
        print(fn.memory.at(seq=n))
    try:
        fn(torch.randint(0, 30522, (1, 600)))
    except ValueError as e:
        print(f"ValueError: {e}")


if __name__ == "__main__":
    main()
