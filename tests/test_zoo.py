"""The model zoo: the architectures people run, tiny configs with random weights, real inputs
(padding masks included), each compiled once and compared with PyTorch.

Tolerance: a max abs diff per kind of output (`ATOL`), about 10x the largest observed on an
AVX2 Zen 3 (AMD EPYC, znver3; float32 sums in another order, and other CPUs' GEMM kernels use
other orders): decoder logits (|x| < 1) 2e-6, encoder hidden states (|x| ~3) 1e-5,
encoder-decoder states 2e-5, Whisper's states 1e-5, image feature maps / tokens (|x| up to ~8)
5e-5, the 1-D conv net's outputs 1e-6, UNet noise predictions 2e-5. Encoders compare every
position, padded ones too (their queries still attend to the real keys); decoders with
left padding compare the real positions only, as a user reads them (a padded query row has no
key to attend to). Batch norms get random running statistics and affine parameters first (as
a trained model has; fresh ones are the identity), so that folding them into the convolutions
is tested with real numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import transformers as T

import tensor_graphs as tg

#: max |tg - torch| per case kind; the largest observed on an AVX2 Zen 3, AMD EPYC znver3 in the comments
ATOL = {
    "decoder": 2e-6,  # logits, |x| < 1: observed 1.8e-7
    "encoder": 1e-5,  # last hidden states, |x| ~3: observed 9.5e-7
    "seq2seq": 2e-5,  # decoder states, |x| ~3: observed 1.0e-6
    "audio": 1e-5,  # Whisper decoder states, |x| ~3: observed 7.2e-7
    "image": 5e-5,  # feature maps / tokens, |x| up to ~8: observed 3.3e-6 (ResNet; ViTs 1.9e-6)
    "signal": 1e-6,  # the 1-D conv net's outputs, |x| < 1: observed 6e-8
    "unet": 2e-5,  # noise predictions, |x| ~2: observed 1.3e-6
}
BATCH, SEQ, VOCAB = 2, 9, 100

#: a tiny transformer: 2 layers, d 32, 4 heads, FFN 64
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64, vocab_size=VOCAB)


@dataclass(frozen=True)
class Case:
    build: Callable[[], torch.nn.Module]
    #: "encoder" (ids, mask -> last_hidden_state), "decoder" (ids, left-padded mask -> logits)
    kind: str


class Encoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, token_types: bool = False):
        super().__init__()
        self.model, self.token_types = model, token_types

    def forward(self, ids, mask):
        kw = {"token_type_ids": (torch.arange(ids.shape[1]) >= ids.shape[1] // 2).long().expand_as(ids)} if self.token_types else {}
        return self.model(input_ids=ids, attention_mask=mask, **kw).last_hidden_state


class Seq2Seq(torch.nn.Module):
    """An encoder-decoder (T5, BART): source ids + padding mask, decoder ids -> decoder states."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, mask, decoder_ids):
        return self.model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, use_cache=False).last_hidden_state


class Whisper(torch.nn.Module):
    """Whisper: log-mel features (through its two conv1d layers) + decoder ids -> decoder states."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, features, decoder_ids):
        return self.model(input_features=features, decoder_input_ids=decoder_ids, use_cache=False).last_hidden_state


class Vision(torch.nn.Module):
    """An image model: pixel_values -> last_hidden_state (feature maps for CNNs, tokens for ViTs)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        return self.model(pixel_values=pixels).last_hidden_state


class UNet(torch.nn.Module):
    """diffusers' UNet2DModel: the noise prediction for a noisy sample at a timestep."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, sample, timestep):
        return self.model(sample, timestep).sample


class Decoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits


def _bert_with_token_types() -> torch.nn.Module:
    return Encoder(T.BertModel(T.BertConfig(**SMALL)), token_types=True)


def _unet() -> torch.nn.Module:
    diffusers = pytest.importorskip("diffusers")
    return UNet(
        diffusers.UNet2DModel(
            sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
            down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=8, attention_head_dim=8,
        )
    )


def _cnn() -> torch.nn.Module:
    """A small image classifier: conv + batch norm + ReLU, max pooling, average pooling, a head."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
        nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def _conv1d_net() -> torch.nn.Module:
    """A 1-D conv net over a signal: conv1d, batch norm, GELU, strided conv, max and adaptive pooling."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv1d(4, 8, 5, padding=2), nn.BatchNorm1d(8), nn.GELU(), nn.Conv1d(8, 8, 3, stride=2, dilation=2),
        nn.ReLU(), nn.MaxPool1d(2), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 3),
    )


#: a tiny vision transformer: 32x32 images in 8x8 patches
VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8)
#: tiny encoder-decoders
SEQ2SEQ = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)


ZOO: dict[str, Case] = {
    "bert": Case(_bert_with_token_types, "encoder"),
    "roberta": Case(lambda: Encoder(T.RobertaModel(T.RobertaConfig(**SMALL, pad_token_id=1))), "encoder"),
    "xlm-roberta": Case(lambda: Encoder(T.XLMRobertaModel(T.XLMRobertaConfig(**SMALL, pad_token_id=1))), "encoder"),
    "distilbert": Case(
        lambda: Encoder(T.DistilBertModel(T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64))),
        "encoder",
    ),
    "albert": Case(lambda: Encoder(T.AlbertModel(T.AlbertConfig(**SMALL, embedding_size=16))), "encoder"),
    "electra": Case(lambda: Encoder(T.ElectraModel(T.ElectraConfig(**SMALL, embedding_size=32))), "encoder"),
    "deberta-v2": Case(lambda: Encoder(T.DebertaV2Model(T.DebertaV2Config(**SMALL))), "encoder"),
    "t5-encoder": Case(
        lambda: Encoder(T.T5EncoderModel(T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4))), "encoder"
    ),
    "bart-encoder": Case(
        lambda: Encoder(
            T.BartModel(
                T.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
            ).get_encoder()
        ),
        "encoder",
    ),
    "llama": Case(lambda: Decoder(T.LlamaForCausalLM(T.LlamaConfig(**SMALL, num_key_value_heads=2))), "decoder"),
    "mistral": Case(lambda: Decoder(T.MistralForCausalLM(T.MistralConfig(**SMALL, num_key_value_heads=2))), "decoder"),
    "qwen2": Case(lambda: Decoder(T.Qwen2ForCausalLM(T.Qwen2Config(**SMALL, num_key_value_heads=2))), "decoder"),
    "qwen3": Case(lambda: Decoder(T.Qwen3ForCausalLM(T.Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8))), "decoder"),
    "gemma": Case(lambda: Decoder(T.GemmaForCausalLM(T.GemmaConfig(**SMALL, num_key_value_heads=2, head_dim=8))), "decoder"),
    "gemma2": Case(lambda: Decoder(T.Gemma2ForCausalLM(T.Gemma2Config(**SMALL, num_key_value_heads=2, head_dim=8))), "decoder"),
    "phi": Case(lambda: Decoder(T.PhiForCausalLM(T.PhiConfig(**SMALL))), "decoder"),
    "phi3": Case(lambda: Decoder(T.Phi3ForCausalLM(T.Phi3Config(**SMALL, num_key_value_heads=2, pad_token_id=0))), "decoder"),
    "stablelm": Case(lambda: Decoder(T.StableLmForCausalLM(T.StableLmConfig(**SMALL, num_key_value_heads=2))), "decoder"),
    "olmo": Case(lambda: Decoder(T.OlmoForCausalLM(T.OlmoConfig(**SMALL, num_key_value_heads=2, pad_token_id=0))), "decoder"),
    "gpt2": Case(lambda: Decoder(T.GPT2LMHeadModel(T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64))), "decoder"),
    "gpt-neox": Case(lambda: Decoder(T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**SMALL))), "decoder"),
    "gpt-j": Case(lambda: Decoder(T.GPTJForCausalLM(T.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4))), "decoder"),
    "codegen": Case(lambda: Decoder(T.CodeGenForCausalLM(T.CodeGenConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4))), "decoder"),
    "opt": Case(lambda: Decoder(T.OPTForCausalLM(T.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, max_position_embeddings=64, word_embed_proj_dim=32))), "decoder"),
    "bloom": Case(lambda: Decoder(T.BloomForCausalLM(T.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4))), "decoder"),
    "falcon": Case(lambda: Decoder(T.FalconForCausalLM(T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4))), "decoder"),
    "mixtral": Case(lambda: Decoder(T.MixtralForCausalLM(T.MixtralConfig(**SMALL, num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2))), "decoder"),
    "qwen3-moe": Case(lambda: Decoder(T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(**SMALL, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32))), "decoder"),
    # encoder-decoders
    "t5": Case(lambda: Seq2Seq(T.T5Model(T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4))), "seq2seq"),
    "bart": Case(lambda: Seq2Seq(T.BartModel(T.BartConfig(**SEQ2SEQ, max_position_embeddings=64))), "seq2seq"),
    "whisper": Case(
        lambda: Whisper(T.WhisperModel(T.WhisperConfig(**SEQ2SEQ, num_mel_bins=8, max_source_positions=16, max_target_positions=32,
                                                       pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))),
        "audio",
    ),
    # vision
    "vit": Case(lambda: Vision(T.ViTModel(T.ViTConfig(**VIT))), "image"),
    "clip-vision": Case(lambda: Vision(T.CLIPVisionModel(T.CLIPVisionConfig(**VIT))), "image"),
    "dinov2": Case(lambda: Vision(T.Dinov2Model(T.Dinov2Config(**VIT))), "image"),
    "swin": Case(lambda: Vision(T.SwinModel(T.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4))), "image"),
    "resnet": Case(lambda: Vision(T.ResNetModel(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="bottleneck"))), "image"),
    "convnext": Case(lambda: Vision(T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2))), "image"),
    "mobilenet-v2": Case(lambda: Vision(T.MobileNetV2Model(T.MobileNetV2Config(depth_multiplier=0.25, image_size=32))), "image"),
    "cnn-bn-pool": Case(_cnn, "image"),
    "conv1d-net": Case(_conv1d_net, "signal"),
    "unet2d": Case(_unet, "unet"),
}


def inputs(kind: str, seed: int) -> tuple[torch.Tensor, ...]:
    """A case's inputs. Text: token ids and a 0/1 mask, row 1 padded (at the end for encoders
    and encoder-decoders, on the left for decoders, as transformers pads for generation), plus
    decoder ids for encoder-decoders. Images: a batch of two 32x32 RGB images; a UNet: a noisy
    16x16 sample and a timestep; a signal: two 4-channel series of 20 steps; audio: 8 mel bins x
    32 frames."""
    g = torch.Generator().manual_seed(seed)
    if kind == "image":
        return (torch.randn(BATCH, 3, 32, 32, generator=g),)
    if kind == "unet":
        return torch.randn(1, 3, 16, 16, generator=g), torch.tensor([10 + 400 * seed])
    if kind == "signal":
        return (torch.randn(BATCH, 4, 20, generator=g),)
    decoder_ids = torch.randint(2, VOCAB, (BATCH, 5), generator=g)
    if kind == "audio":
        return torch.randn(BATCH, 8, 32, generator=g), decoder_ids
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    if kind == "decoder":
        mask[1, :3] = 0
    else:
        mask[1, SEQ - 3 :] = 0
    return (ids, mask, decoder_ids) if kind == "seq2seq" else (ids, mask)


def _as_trained(model: torch.nn.Module) -> torch.nn.Module:
    """Random running statistics and affine parameters in every batch norm."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.running_mean.normal_(0.0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                if m.affine:
                    m.weight.normal_(1.0, 0.2)
                    m.bias.normal_(0.0, 0.2)
    return model


_COMPILED: dict[str, tuple[torch.nn.Module, object]] = {}


def compiled(name: str):
    """The model and its compiled function, built once per test session."""
    if name not in _COMPILED:
        torch.manual_seed(0)
        model = _as_trained(ZOO[name].build()).eval()
        _COMPILED[name] = (model, tg.compile(model, inputs(ZOO[name].kind, 0)))
    return _COMPILED[name]


@pytest.mark.parametrize("name", list(ZOO))
@pytest.mark.parametrize("seed", [0, 1])
def test_zoo_matches_pytorch(name, seed):
    model, fn = compiled(name)
    kind = ZOO[name].kind
    args = inputs(kind, seed)
    with torch.no_grad():
        expected = model(*args)
    got = fn(*args)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    diff = (got - expected).abs()
    if kind == "decoder":
        diff = diff[args[1].bool()]
    assert expected.abs().max().item() > 1e-2, f"{name}: the reference output is too small to test anything"
    assert diff.max().item() <= ATOL[kind], f"{name}: max abs diff {diff.max().item():.3g} > {ATOL[kind]}"


def test_zoo_attention_is_fused():
    """The padding mask reaches `tg.attention` as an operand: one attention op per layer."""
    for name in ("bert", "llama"):
        _, fn = compiled(name)
        assert fn.ir("tg").count("tg.attention ") == 2, name


def test_multihead_attention_and_encoder_layer():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0).eval()

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = mha

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    x = torch.randn(2, 5, 16)
    for model in (SelfAttention().eval(), layer):
        fn = tg.compile(model, (x,))
        with torch.no_grad():
            assert (fn(x) - model(x)).abs().max().item() <= 5e-6  # |x| ~3: observed 3.6e-7
        assert fn.ir("tg").count("tg.attention ") == 1


def test_in_place_ops_are_functionalised():
    class InPlace(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            y.add_(1.0)
            return torch.relu_(y) * 2

    torch.manual_seed(0)
    model, x = InPlace().eval(), torch.randn(3, 8)
    fn = tg.compile(model, (x,))
    with torch.no_grad():
        assert (fn(x) - model(x)).abs().max().item() <= 1e-6  # |x| ~5: observed 2.4e-7


def test_falcon_alibi_bias_folds_through_bfloat16():
    """Falcon with ALiBi (falcon-rw) builds its bias in bfloat16 (``slopes.bfloat16() *
    positions``, then float32): from the token ids alone the positions are constants and
    constant-fold evaluates the chain in torch (bf16 rounding included) into one float32
    constant, the logits within ATOL["decoder"] of PyTorch's. With an attention mask the bias
    depends on the mask: bf16 arithmetic at run time, computed in float32 and rounded to bf16 after each op
    (`widen-dtypes`) as eager computes it: the logits within that bound too (it used to be
    refused: "the CPU path has no bf16 arithmetic")."""

    torch.manual_seed(0)
    model = T.FalconForCausalLM(T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True,
                                               new_decoder_architecture=False, multi_query=False, parallel_attn=False, bias=True)).eval()

    class Ids(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(ids, use_cache=False).logits

    class IdsMask(Ids):
        def forward(self, ids, mask):
            return self.m(ids, attention_mask=mask, use_cache=False).logits

    ids = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(0))
    fn = tg.compile(Ids().eval(), (ids,))
    assert "xbf16>" not in fn.ir("tg")  # no bfloat16 tensor left
    with torch.no_grad():
        expected = Ids()(ids)
    assert expected.abs().max().item() > 1e-2 and (fn(ids) - expected).abs().max().item() <= ATOL["decoder"]
    mask = torch.ones(1, 7, dtype=torch.long)
    mask[0, :2] = 0
    fn = tg.compile(IdsMask().eval(), (ids, mask))
    with torch.no_grad():
        expected = IdsMask()(ids, mask)
    assert (fn(ids, mask) - expected).abs().max().item() <= ATOL["decoder"]


class _HalfTimesNumbers(torch.nn.Module):
    def forward(self, x):
        return ((torch.arange(5).half() * 0.1) * 3 + 1.1).float() * x


class _BFloat16TimesNumbers(torch.nn.Module):
    def forward(self, x):
        b = (torch.arange(5) * 0.1).to(torch.bfloat16)
        return (b + b * 3 - 0.7).float() * x


class _BFloat16AtRunTime(torch.nn.Module):
    def forward(self, x):
        return (x.to(torch.bfloat16) * 2.1).float()


@pytest.mark.parametrize("module", [_HalfTimesNumbers, _BFloat16TimesNumbers])
def test_half_and_bfloat16_constants_fold_as_torch_computes_them(module):
    """A Python number against a float16 or bfloat16 tensor is imported as a float32 scalar, as
    torch's kernels read it (unrounded; a bf16 constant has no NumPy form: it used to fail at
    import with "Got unsupported ScalarType BFloat16", and float16 constants folded 0.1 rounded
    to half first: 0.2998 where torch gives 0.30005): folded, exactly torch's values."""
    x = torch.ones(5)
    fn = tg.compile(module().eval(), (x,))
    torch.testing.assert_close(torch.as_tensor(fn(x)), module()(x), rtol=0, atol=0)


def test_bfloat16_arithmetic_at_run_time_is_eagers_to_the_bit():
    """bf16 arithmetic at run time computes in float32 and rounds each result to bf16, as eager's
    CPU kernels do: the same bits (it used to be refused: "the CPU path has no bf16 arithmetic")."""
    x = torch.randn(64)
    fn = tg.compile(_BFloat16AtRunTime().eval(), (x,))
    torch.testing.assert_close(torch.as_tensor(fn(x)), _BFloat16AtRunTime()(x), rtol=0, atol=0)
