"""The model of the work a decode step does: bytes read and FLOPs, from the GGUF's tensors, a config.json or
a preset. `plan`, the roofline predictor and the dashboard all take their bytes and FLOPs from here.

Bytes per decode step = the weights actually read + the KV cache read at the current context:
- every weight matrix is read once per step, whatever the batch (one step serves all its sequences);
- the input embedding is a lookup: an untied model reads one row per sequence, not the matrix; a tied
  model (Gemma: no output.weight) multiplies the whole embedding as its output projection every step;
- KV read per sequence = 2 · layers · kv_heads · head_dim · bytes per element · tokens in its context.
FLOPs per token = 2 × the weights multiplied (the matrices, the tied embedding included) + attention,
4 · layers · heads · head_dim · context (QKᵀ and AV). Norms and activations are left out (< 0.1 %).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from measure.core.hf_config import DTYPE_BYTES, Precision, precision

if TYPE_CHECKING:
    from engines.gguf_file import GGUFInfo
    from presets import ModelPreset


# How an engine holds the KV of windowed layers (docs/design/model-reads.md): the ring a window needs, or the whole context.
KV_LAYOUTS = ("llama.cpp-window", "llama.cpp-full", "mlx", "full")
KV_PAD = 256  # llama.cpp pads a context to 256 cells; mlx-lm grows its caches in steps of 256 tokens
LLAMA_UBATCH = 512  # llama.cpp's default micro-batch: its window cache holds the window plus one micro-batch


def _pad(n: float, to: int = KV_PAD) -> int:
    return int(-(-n // to) * to)


@dataclass(frozen=True)
class Experts:
    """Routed experts: `count` in each MoE layer, `used` per token; `bytes_each` / `params_each`: one expert's
    matrices summed over every MoE layer (so `used × bytes_each` is what one token reads of them);
    `correlation`: how alike the routing of one step's tokens is (ρ; 0: independent tokens, a random router);
    `layers`: how many layers route to experts (0: not said, every layer)."""

    count: int
    used: int
    bytes_each: float
    params_each: float
    correlation: float = 0.0
    layers: int = 0

    def distinct(self, tokens: float) -> float:
        """Expected distinct experts a layer reads for a step of `tokens` tokens: E · (1 − (1 − k/E)^B′), k for
        one token, approaching all E as B grows. B′ = B ÷ (1 + (B − 1)·ρ) are the independent tokens that B
        tokens whose routings correlate by ρ count as (the design effect of equicorrelated draws): ρ = 0 is
        uniform, independent routing; a trained router sends one step's tokens to overlapping experts
        (docs/design/model-reads.md)."""
        if tokens <= 0:
            return 0.0
        b = float(tokens) / (1.0 + (float(tokens) - 1.0) * self.correlation) if tokens > 1 else float(tokens)
        return float(self.count * (1.0 - (1.0 - self.used / self.count) ** b))


# The routing correlation of a trained router where the model does not say its own: fitted by
# `benchmarks/physics.py --fit` on Qwen3-Coder-30B-A3B's llama-batched-bench rows on DGX Spark (B = 2 … 32, random
# tokens a step), with a routing layer's batch cost (presets/kernels.toml [cuda] moe_batch_layer_ms) and each step
# priced by llama.cpp's kernels (roofline.kernel_time); gpt-oss-20b / -120b's rows are
# held out. A model made with random weights (engines/gguf_synth.py)
# routes independently and says so in its file (ρ = 0).
ROUTING_CORRELATION = 0.095
ROUTING_ASSUMED = (f"routing correlation ρ = {ROUTING_CORRELATION} (a trained router's, fitted on published batches: "
                   "benchmarks/physics.py): a batch step reads the experts of B ÷ (1 + (B − 1)·ρ) independent tokens")


@dataclass(frozen=True)
class WorkModel:
    name: str
    source: str
    params: int
    file_bytes: int  # the model file (or folder) as shipped: what must be resident (every expert)
    weight_bytes: int  # weight bytes every decode step reads (routed experts and embedding rows aside)
    embd_row_bytes: float  # an untied model reads one embedding row per sequence per step; tied: 0
    matmul_params: int  # weights multiplied per token outside the routed experts (2 FLOP each)
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_element_bytes: float = 2.0
    note: str = ""  # which weights were counted, in words
    experts: Experts | None = None
    window: int = 0  # sliding window, tokens (0: none)
    window_layers: int = 0  # of `layers`, those attending only the window
    linear_layers: int = 0  # of `layers`, those with a fixed state instead of KV (linear attention, SSM)
    state_bytes: float = 0.0  # that state, one sequence, all such layers
    mla_dim: int = 0  # latent attention: elements cached a token and layer (kv_lora_rank + rope dims); 0: K and V
    assumed: tuple[str, ...] = ()  # what the source did not say and was assumed, in words
    quant: str = ""  # the weights' llama.cpp type (Q4_K_M, Q8_0, F16, MXFP4; "": not known): quant_family
    # the matrices a step multiplies (outside the routed experts), bytes by ggml type (GGUF only; (): not known): the
    # CPU picks its matmul path by type (presets/kernels.toml [cpu]; roofline.cpu_batch_path)
    matmul_type_bytes: tuple[tuple[str, int], ...] = ()

    @property
    def moe_layers(self) -> int:
        """Layers that route to experts: each adds its routing's fixed cost to a step (Machine.moe_layer_s)."""
        if not self.experts:
            return 0
        return self.experts.layers or self.layers

    @property
    def attention_layers(self) -> int:
        return self.layers - self.linear_layers

    @property
    def full_layers(self) -> int:
        return self.attention_layers - self.window_layers

    @property
    def kv_layer_token_bytes(self) -> float:
        """KV one layer holds for one token: 2 · kv_heads · head_dim · bytes (K and V), or MLA's latent."""
        if self.mla_dim:
            return self.mla_dim * self.kv_element_bytes
        return 2 * self.kv_heads * self.head_dim * self.kv_element_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """KV a token adds while the context is within every window: all attention layers."""
        return self.attention_layers * self.kv_layer_token_bytes

    def kv_read_bytes(self, ctx: int, window_cells: int = 0) -> float:
        """KV one sequence reads in a decode step at `ctx` tokens: full layers the whole context, windowed
        layers at most their window (or `window_cells`, the cells of the window's cache an attention kernel reads
        where it reads the masked ones too: window_cache_cells), linear layers their state."""
        held = self.full_layers * ctx + self.window_layers * min(ctx, window_cells or self.window or ctx)
        return held * self.kv_layer_token_bytes + self.state_bytes

    def window_cache_cells(self, ubatch: int = LLAMA_UBATCH) -> int:
        """The cells of llama.cpp's window cache (pad(window + ubatch), as kv_alloc_bytes): what a kernel that reads
        masked cells reads of a windowed layer once the context has filled it (docs/design/kernels.md, "Attention");
        0 for a model without windows."""
        return _pad(self.window + ubatch) if self.window and self.window_layers else 0

    def kv_alloc_bytes(self, ctx: int, layout: str = "llama.cpp-window", ubatch: int = LLAMA_UBATCH) -> float:
        """KV memory one sequence of `ctx` tokens holds in an engine (docs/design/model-reads.md):
        llama.cpp-window: llama.cpp's reduced window cache (llama-server's default): full layers ctx, windowed
        layers min(ctx, pad(window + ubatch)); llama.cpp-full: every layer ctx (its "full-size SWA cache");
        mlx: full layers ctx, windowed layers a rotating buffer of the window;
        full: every layer ctx (an engine not modelled). Linear layers add their state."""
        if layout not in KV_LAYOUTS:
            raise ValueError(f"unknown KV layout {layout!r}; one of {', '.join(KV_LAYOUTS)}")
        n = ctx  # a request's own cells (a context made for it is padded to 256 besides: KV_PAD)
        if not self.window or not self.window_layers or layout in ("llama.cpp-full", "full"):
            win = n
        elif layout == "mlx":
            win = min(n, self.window)
        else:
            win = min(n, _pad(self.window + ubatch))
        return (self.full_layers * n + self.window_layers * win) * self.kv_layer_token_bytes + self.state_bytes

    def read_bytes(self, tokens: float = 1) -> float:
        """Weight bytes a decode step of `tokens` sequences reads: the always-read part, the distinct experts
        its tokens are routed to, and one embedding row a sequence (untied)."""
        routed = self.experts.distinct(tokens) * self.experts.bytes_each if self.experts else 0.0
        return self.weight_bytes + routed + tokens * self.embd_row_bytes

    @property
    def resident_bytes(self) -> int:
        """Every weight held in memory (all experts): the file."""
        return self.file_bytes

    def bytes_per_step(self, contexts: Sequence[int] = (0,)) -> float:
        """One decode step of len(contexts) sequences, each holding that many tokens of context."""
        return self.read_bytes(len(contexts)) + sum(self.kv_read_bytes(c) for c in contexts)

    @property
    def active_params(self) -> float:
        """Weights multiplied per token: the dense part and the `used` experts."""
        return self.matmul_params + (self.experts.used * self.experts.params_each if self.experts else 0.0)

    def flops_per_token(self, context: int = 0) -> float:
        attended = self.full_layers * context + self.window_layers * min(context, self.window or context)
        return 2.0 * self.active_params + 4.0 * self.heads * self.head_dim * attended

    def flops_per_step(self, contexts: Sequence[int] = (0,)) -> float:
        return sum(self.flops_per_token(c) for c in contexts)

    def prefill_flops(self, prompt_tokens: int) -> float:
        """A prompt of n tokens: n tokens' weights work + attention over 0 … n − 1 tokens of context."""
        return prompt_tokens * 2.0 * self.active_params + 4.0 * self.attention_layers * self.heads * self.head_dim * (
            prompt_tokens * (prompt_tokens - 1) / 2)

    def matmul_weights(self, tokens: float = 1) -> float:
        """Weights a decode step of `tokens` sequences multiplies: the dense matrices and the distinct experts its
        tokens are routed to (what the vector kernels dequantise once a step)."""
        return self.matmul_params + (self.experts.distinct(tokens) * self.experts.params_each if self.experts else 0.0)

    def describe(self) -> str:
        """What a step reads, in one line (plan, the dashboard's formula)."""
        parts = [f"{self.weight_bytes / 1e9:.2f} GB always"]
        if self.experts:
            e = self.experts
            parts.append(f"+ {e.used} of {e.count} experts × {e.bytes_each / 1e6:.0f} MB a token "
                         f"(B tokens: E·(1 − (1 − k/E)^B′) distinct, B′ = B ÷ (1 + (B − 1)·{e.correlation:g}))")
        if self.window_layers:
            parts.append(f"{self.window_layers} of {self.attention_layers} attention layers windowed "
                         f"({self.window} tokens)")
        if self.linear_layers:
            parts.append(f"{self.linear_layers} linear layers ({self.state_bytes / 2**20:.1f} MiB state)")
        if self.mla_dim:
            parts.append(f"latent attention ({self.mla_dim} elements a token and layer)")
        return ", ".join(parts)


# The families of llama.cpp weight types whose vector kernels differ in the arithmetic a weight costs
# (docs/design/kernels.md, "Quant types"): K-quants' 256-weight super-blocks carry 6-bit packed scales and mins per
# 32 weights; legacy quants one scale (and min) per 32; floats are converted, not decoded.
QUANT_FAMILIES = (("k", ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")), ("legacy", ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")),
                  ("float", ("F16", "BF16", "F32")), ("mxfp4", ("MXFP4",)), ("iq", ("IQ",)))


def quant_family(quant: str) -> str:
    """'k', 'legacy', 'float', 'mxfp4', 'iq' for a llama.cpp type name (Q4_K_M → k), '' for one not known."""
    q = quant.strip().upper()
    for family, prefixes in QUANT_FAMILIES:
        if any(q.startswith(p) for p in prefixes):
            return family
    return ""


def _tied_note(tied: bool, embd_bytes: float) -> str:
    if tied:
        return "tied embedding: the output projection reads it whole every step (counted)"
    return f"untied: the input embedding ({embd_bytes / 1e9:.2f} GB) is a lookup, one row per sequence (excluded)"


# Architectures whose GGUF this model of work reads fully (their experts, windows and linear layers come from the
# file's own keys and tensors); another is read as the file says and named with what is assumed.
KNOWN_ARCHS = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma", "gemma2", "gemma3", "phi3", "granite",
    "granitemoe", "olmoe", "olmo2", "deepseek2", "gpt-oss", "cohere2", "command-r", "starcoder2", "smollm3", "glm4",
    "glm4moe", "llama4", "exaone4", "mamba2", "granitehybrid", "lfm2", "jamba", "falcon-h1", "nemotron_h", "ernie4_5",
    "ernie4_5-moe", "hunyuan-moe", "dots1", "bailingmoe", "phimoe", "arcee"})


def from_gguf(info: GGUFInfo, kv_element_bytes: float = 2.0) -> WorkModel:
    """From engines.gguf_file.GGUFInfo (its tensor totals are read once and cached): the routed experts'
    tensors (`ffn_*_exps`) apart from the bytes every step reads; windows, linear layers and latent attention
    from the file's keys (engines/gguf_file.beyond_dense)."""
    tensor_bytes, params, layers, kv_heads, head_dim = (info.tensor_bytes, info.params, info.layers, info.kv_heads,
                                                       info.head_dim)
    if tensor_bytes is None or params is None or layers is None or kv_heads is None or head_dim is None:
        raise ValueError(f"{info.path}: the GGUF lacks the tensor totals or attention shape for a work model")
    embd_bytes, embd_params = info.embd_bytes or 0, info.embd_params or 0
    tied = bool(info.tied)
    assumed = list(info.assumed)
    if info.architecture not in KNOWN_ARCHS:
        assumed.append(f"architecture {info.architecture!r} is not one this model of work knows: read as its file "
                       "says (experts from ffn_*_exps tensors, a window only where a pattern is given), the rest "
                       "as dense full attention")
    experts = None
    ex_bytes, ex_params = info.expert_bytes or 0, info.expert_params or 0
    if info.experts and info.experts_used and ex_bytes:
        rho = ROUTING_CORRELATION if info.routing_correlation is None else info.routing_correlation
        experts = Experts(info.experts, info.experts_used, ex_bytes / info.experts, ex_params / info.experts, rho,
                          info.moe_layers or 0)
        if info.routing_correlation is None:
            assumed.append(ROUTING_ASSUMED)
    else:
        ex_bytes = ex_params = 0  # no routing known: every expert is read (counted in the always-read bytes)
    return WorkModel(
        name=info.name, source=f"GGUF {info.path}", params=params, file_bytes=info.file_bytes,
        weight_bytes=tensor_bytes - (0 if tied else embd_bytes) - ex_bytes,
        embd_row_bytes=0.0 if tied or not info.vocab else embd_bytes / info.vocab,
        matmul_params=params - (0 if tied else embd_params) - ex_params, layers=layers,
        heads=info.heads or kv_heads, kv_heads=kv_heads, head_dim=head_dim,
        kv_element_bytes=kv_element_bytes, note=_tied_note(tied, embd_bytes), experts=experts,
        window=info.sliding_window or 0, window_layers=info.window_layers or 0,
        linear_layers=info.linear_layers or 0, state_bytes=info.state_bytes or 0.0, mla_dim=info.mla_dim or 0,
        assumed=tuple(assumed), matmul_type_bytes=info.matmul_type_bytes)


def config_params(cfg: Mapping[str, Any]) -> tuple[int, int]:
    """(all parameters, the input embedding's) of a Llama-shaped config: attention, gated MLP or routed experts,
    norms."""
    shape = _config_shape(cfg)
    return shape.params, shape.embd


def _n(cfg: Mapping[str, Any], *keys: str) -> int:
    """The first of `keys` the config sets, as an int (0: none)."""
    return next((int(cfg[k]) for k in keys if cfg.get(k) is not None), 0)


def _ffn_widths(cfg: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(routed experts, a dense FFN's width, an expert's, the shared experts' together) as a config states them: an
    expert's is moe_intermediate_size, else intermediate_size (gpt-oss and Mixtral give an expert's there)."""
    n_exp = _n(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    inter = _n(cfg, "intermediate_size")
    ffn_e = _n(cfg, "moe_intermediate_size") or inter
    return n_exp, inter, ffn_e, _n(cfg, "n_shared_experts") * ffn_e + _n(cfg, "shared_expert_intermediate_size")


def active_ffn(cfg: Mapping[str, Any]) -> int:
    """The width of the MLP a token runs (mlx's prefill activations): a dense model's intermediate_size; a mixture
    of experts' experts each token uses × their width + its shared experts', or its leading dense layers' where
    wider."""
    n_exp, inter, ffn_e, shared = _ffn_widths(cfg)
    if not n_exp:
        return inter
    return max(_n(cfg, "num_experts_per_tok") * ffn_e + shared, inter if _n(cfg, "first_k_dense_replace") else 0)


def _need(cfg: Mapping[str, Any], key: str) -> int:
    if cfg.get(key) is None:
        raise ValueError(f"the config has no {key} (and its model_type {cfg.get('model_type')!r} has no default "
                         "known here)")
    return int(cfg[key])


@dataclass(frozen=True)
class ConfigShape:
    """What a config.json says of a model's shape (_config_shape): parameters by part (hf_config.PARTS), experts,
    layer kinds, heads."""

    params: int  # all of them
    parts: dict[str, int]  # hf_config.PARTS → its parameters (head: 0 where tied; experts: every routed one)
    experts: int  # routed experts (0: dense)
    used: int  # experts per token (0: not said)
    expert_params: int  # one routed expert's, over its layers
    window: int  # the sliding window, where some layers slide (0: none)
    window_layers: int
    linear_layers: int
    heads: int
    kv: int
    hd: int
    layers: int
    dense_layers: int  # of a mixture of experts, the leading layers without experts (first_k_dense_replace)
    mla: int  # MLA's cached width per token (0: not MLA)
    state: float  # a linear-attention layer set's state bytes
    vocab: int
    tied: bool

    @property
    def embd(self) -> int:
        """The input embedding's parameters."""
        return self.parts["embedding"]


def _layer_kinds(cfg: Mapping[str, Any], layers: int) -> tuple[int, int, int]:
    """(window, windowed layers, linear layers) from layer_types, else a sliding_window_pattern."""
    types = [str(t) for t in cfg.get("layer_types") or []]
    window = int(cfg.get("sliding_window") or 0) if cfg.get("use_sliding_window", True) is not False else 0
    if types:
        n_win = sum(t == "sliding_attention" for t in types)
        n_lin = sum(t == "linear_attention" for t in types)
    else:
        pattern = _n(cfg, "sliding_window_pattern")
        n_win = sum(1 for i in range(layers) if i % pattern < pattern - 1) if window and pattern else 0
        n_lin = 0
    return (window if n_win else 0), n_win, n_lin


def _config_shape(cfg: Mapping[str, Any]) -> ConfigShape:
    """Parameters by part, the experts and the layer kinds of a Hugging Face config, its architecture's defaults
    filled in (hf_config.with_defaults): Llama, Qwen-MoE, Mixtral, DeepSeek, Gemma 2/3, gpt-oss, Qwen3-Next
    shapes. Attention: q, k, v, o (and their biases where attention_bias); 2 norms a layer and a final one."""
    h, layers, heads = _need(cfg, "hidden_size"), _need(cfg, "num_hidden_layers"), _need(cfg, "num_attention_heads")
    kv = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or h // heads)
    vocab = _need(cfg, "vocab_size")
    n_exp, inter, ffn_e, shared = _ffn_widths(cfg)
    dense_layers = _n(cfg, "first_k_dense_replace") if n_exp else layers
    moe_layers = layers - dense_layers
    bias = heads * hd + 2 * kv * hd + h if cfg.get("attention_bias") else 0
    expert_each = 3 * h * ffn_e * moe_layers
    tied = bool(cfg.get("tie_word_embeddings", False))
    parts = {"embedding": vocab * h, "head": 0 if tied else vocab * h,
             "attention": layers * (2 * h * heads * hd + 2 * h * kv * hd + bias),
             "mlp": dense_layers * 3 * h * inter + moe_layers * 3 * h * shared,  # dense MLPs and shared experts
             "router": moe_layers * n_exp * h, "experts": n_exp * expert_each, "norms": layers * 2 * h + h}
    window, n_win, n_lin = _layer_kinds(cfg, layers)
    return ConfigShape(
        params=sum(parts.values()), parts=parts, experts=n_exp, used=_n(cfg, "num_experts_per_tok"),
        expert_params=expert_each, window=window, window_layers=n_win, linear_layers=n_lin, heads=heads, kv=kv,
        hd=hd, layers=layers, dense_layers=dense_layers if n_exp else 0,
        mla=_n(cfg, "kv_lora_rank") + _n(cfg, "qk_rope_head_dim") if cfg.get("kv_lora_rank") else 0,
        state=n_lin * _n(cfg, "linear_num_value_heads") * _n(cfg, "linear_key_head_dim")
        * _n(cfg, "linear_value_head_dim") * 4.0, vocab=vocab, tied=tied)


@dataclass(frozen=True)
class ConfigFile:
    """A Hugging Face / mlx-lm config.json as read (measure/machine/model_files.py reads it): where it is, the
    language model's part of its JSON (hf_config.text_part: `text_config` where it has one, a multimodal model;
    else all of it) with its architecture's defaults filled in (hf_config.with_defaults), the bytes of the
    safetensors beside it (0: none) and what reading it assumed."""

    path: Path
    text: dict[str, Any]
    safetensors_bytes: int = 0
    assumed: tuple[str, ...] = ()


# Safetensors that differ from what the config prices by more than this are priced at their own average bytes a
# weight: a file also holds what the text model does not (a vision tower: Gemma 3 4B's is 10 % of its file), but
# a difference beyond a quarter is a precision the config does not say.
FILE_TOLERANCE = 0.25


def _part_bytes(config: ConfigFile, sh: ConfigShape) -> tuple[dict[str, float], str, list[str]]:
    """Bytes of each part (hf_config.PARTS): params × the config's precision (hf_config.precision); where the
    safetensors beside it disagree (FILE_TOLERANCE) or the precision is not one priced here, their average a
    weight. With the words for `note` and what was assumed."""
    files = config.safetensors_bytes
    try:
        prec: Precision | None = precision(config.text)
    except ValueError as exc:
        if not files:
            raise
        prec, why = None, str(exc).split(":")[0]
    if prec is not None:
        sized = {k: v * prec.of(k) for k, v in sh.parts.items()}
        total = sum(sized.values())
        if not files:
            return sized, f"no weights beside the config: {total / 1e9:.2f} GB = parameters × {prec.what}", \
                list(prec.assumed)
        if abs(files - total) <= FILE_TOLERANCE * files:
            return sized, f"{prec.what}; the safetensors {files / 1e9:.2f} GB", list(prec.assumed)
        why = f"the config prices its {sh.params / 1e9:.2f} B parameters at {total / 1e9:.2f} GB ({prec.what})"
    per = files / sh.params
    return ({k: v * per for k, v in sh.parts.items()}, f"the safetensors' {files / 1e9:.2f} GB",
            [f"{why}; the safetensors beside it hold {files / 1e9:.2f} GB: every weight priced at their average, "
             f"{per:.3f} B"])


def from_config(config: ConfigFile) -> WorkModel:
    """A config.json (machine/model_files.read_config): each part's bytes from the precision the config states
    (mixed: gpt-oss's MXFP4 experts beside bf16 attention), the file's size from the safetensors beside it, else
    those bytes summed; ValueError where it lacks a shape or states a precision not priced here with no weights
    beside it."""
    p, cfg = config.path, config.text
    sh = _config_shape(cfg)
    sized, how, assumed = _part_bytes(config, sh)
    total = sum(sized.values())
    experts = (Experts(sh.experts, sh.used, sized["experts"] / sh.experts, sh.expert_params,
                       ROUTING_CORRELATION, sh.layers - sh.dense_layers) if sh.experts and sh.used else None)
    routed = sh.experts * sh.expert_params if experts else 0
    embd_bytes = sized["embedding"]
    return WorkModel(
        name=cfg.get("_name_or_path") or p.parent.name, source=f"config {p}", params=sh.params,
        file_bytes=config.safetensors_bytes or int(total),
        weight_bytes=int(total - (0 if sh.tied else embd_bytes) - (sized["experts"] if experts else 0)),
        embd_row_bytes=0.0 if sh.tied else embd_bytes / sh.vocab,
        matmul_params=sh.params - (0 if sh.tied else sh.embd) - routed, layers=sh.layers, heads=sh.heads,
        kv_heads=sh.kv, head_dim=sh.hd,
        kv_element_bytes=DTYPE_BYTES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), 2.0),
        note=f"{_tied_note(sh.tied, embd_bytes)}; {how}", experts=experts, window=sh.window,
        window_layers=sh.window_layers, linear_layers=sh.linear_layers, state_bytes=sh.state,
        mla_dim=sh.mla, assumed=(*config.assumed, *assumed, *_config_assumed(cfg, sh)))


def work_from_dict(d: Mapping[str, Any]) -> WorkModel:
    """A WorkModel as dataclasses.asdict wrote it (a run header's `served`: the model behind an HTTP server, so a
    report or a replay counts what its steps read as the run did). ValueError where it is not one."""
    names = {f.name for f in fields(WorkModel)}
    try:
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("experts"):
            kw["experts"] = Experts(**kw["experts"])
        kw["assumed"] = tuple(kw.get("assumed") or ())
        kw["matmul_type_bytes"] = tuple((str(t), int(n)) for t, n in kw.get("matmul_type_bytes") or ())
        return WorkModel(**kw)
    except TypeError as exc:
        raise ValueError(f"not a work model as inference-top wrote it: {exc}") from None


def _config_assumed(cfg: Mapping[str, Any], sh: ConfigShape) -> tuple[str, ...]:
    out = []
    if sh.experts and not sh.used:
        out.append("num_experts_per_tok not in the config: every expert counted as read")
    if cfg.get("sliding_window") and not sh.window_layers and cfg.get("use_sliding_window", True) is not False:
        out.append(f"sliding_window {cfg['sliding_window']} without layer_types or a pattern: every layer counted "
                   "as full attention")
    if sh.experts and sh.used:
        out.append(ROUTING_ASSUMED)
    if sh.linear_layers and not sh.state:
        out.append(f"{sh.linear_layers} linear-attention layers without their head sizes: state counted as 0")
    return tuple(out)


def from_preset(m: ModelPreset, kv_element_bytes: float = 2.0) -> WorkModel:
    """A presets/models.toml entry (params, bytes as shipped, hidden, vocab, whether tied; for a mixture of
    experts its experts, experts used and expert FFN width; windows and linear layers by count). The embedding
    is priced at the file's bytes per weight, or, where the experts' own bytes are given (gpt-oss: MXFP4 experts
    beside Q8_0 attention and embeddings), at the bytes per weight of everything but the experts."""
    per_param = m.weight_bytes / m.params
    embd = m.vocab * m.hidden
    tied = m.tied_embeddings
    n_exp, used, ffn_e = m.experts or 0, m.experts_used or 0, m.expert_ffn or 0
    moe_layers = m.layers - (m.dense_layers or 0)
    ex_params = 3 * m.hidden * ffn_e * moe_layers if n_exp and used else 0
    ex_file = float(m.expert_bytes or 0)  # the experts' own bytes as shipped (gpt-oss: MXFP4 experts
    ex_each = ex_file / n_exp if ex_file and ex_params else ex_params * per_param  # beside Q8_0 attention)
    rho = ROUTING_CORRELATION if m.routing_correlation is None else m.routing_correlation
    experts = Experts(n_exp, used, ex_each, ex_params, rho, moe_layers) if ex_params else None
    if experts and ex_file:  # the embedding is stored as the rest of the file is, not as the experts are
        per_param = (m.weight_bytes - ex_file) / (m.params - n_exp * ex_params)
    full, linear, window = m.full_attention_layers or 0, m.linear_attention_layers or 0, m.sliding_window or 0
    mla = (m.kv_lora_rank or 0) + (m.qk_rope_head_dim or 0)
    return WorkModel(
        name=m.name, source=f"preset {m.key}", params=m.params, file_bytes=m.file_bytes or m.weight_bytes,
        weight_bytes=int(m.weight_bytes - (0 if tied else embd * per_param) - (n_exp * ex_each if experts else 0)),
        embd_row_bytes=0.0 if tied else m.hidden * per_param,
        matmul_params=int(m.params - (0 if tied else embd) - n_exp * ex_params),
        layers=m.layers, heads=m.heads or m.kv_heads, kv_heads=m.kv_heads, head_dim=m.head_dim,
        kv_element_bytes=kv_element_bytes, note=_tied_note(tied, embd * per_param), experts=experts,
        window=window if full else 0, window_layers=(m.layers - linear - full) if window and full else 0,
        linear_layers=linear, mla_dim=mla if m.kv_lora_rank else 0,
        assumed=(ROUTING_ASSUMED,) if experts and m.routing_correlation is None else (), quant=m.quant)
