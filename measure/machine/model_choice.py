"""Turning command-line choices into an engine spec and run metadata: shared by the TUI and `bench`."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.base import EngineError, EngineSpec
from engines.embedded import EMBEDDED_NAME, embedded_model_path
from engines.gguf_file import GGUFInfo, sha256_prefix
from engines.registry import ENGINES, declared
from measure.machine.model_files import is_gguf, read_gguf, shape_from_config
from measure.machine.probes import auto_threads
from measure.core.records import Mode, RunMeta


@dataclass
class ModelChoice:
    path: Path
    name: str
    file_bytes: int  # the weights the engine reads: the GGUF, or an mlx folder's safetensors
    info: GGUFInfo | None
    embedded: bool
    kv_element_bytes: float = 2.0  # llama.cpp's f16 KV cache; an mlx model's own dtype
    source: str | None = None  # an mlx folder converted from this GGUF

    kv_layout: str = "llama.cpp-window"  # how this engine holds windowed layers' KV (work.KV_LAYOUTS)

    def kv_bytes_per_token(self, ctx: int | None = None) -> float | None:
        """KV bytes a token of context costs; at `ctx`, this engine's allocation for a request of ctx tokens ÷ ctx
        (windowed and linear layers hold less than the context: docs/design/model-reads.md)."""
        if not self.info:
            return None
        if ctx and self.info.tensor_bytes is not None and self.info.layers:
            from measure.core.work import from_gguf

            try:
                return from_gguf(self.info, self.kv_element_bytes).kv_alloc_bytes(ctx, self.kv_layout) / ctx
            except ValueError:
                pass
        return self.info.kv_bytes_per_token(self.kv_element_bytes)


def resolve_model(engine: str, model: str | None, progress: Callable[[str], None] | None = None) -> ModelChoice:
    """The model to load, checked before any worker starts (EngineError: one line saying what to do)."""
    progress = progress or (lambda msg: print(msg, flush=True))
    e = declared(engine)
    if e.model_kind == "mlx":
        return resolve_mlx_model(model, progress)
    if e.model_kind != "gguf":
        raise EngineError(f"--engine {engine} has no model file of ours; the engines with one: "
                          f"{', '.join(n for n, d in ENGINES.items() if d.model_kind != 'none')}")
    if model is None:
        path = embedded_model_path(progress)
        info = read_gguf(path, progress)
        return ModelChoice(path, EMBEDDED_NAME, info.file_bytes, info, True, kv_layout=e.kv_layout)
    info = read_gguf(model, progress)
    return ModelChoice(Path(model), info.name or Path(model).stem, info.file_bytes, info, False, kv_layout=e.kv_layout)


_DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}


def resolve_mlx_model(model: str | None, progress: Callable[[str], None]) -> ModelChoice:
    """An mlx-lm folder as given, or a Gemma 3 GGUF (the embedded one by default) converted once."""
    from engines.gguf_to_mlx import SUPPORTED_ARCHITECTURES, convert_gguf, unsupported
    from measure.core.guard import GuardError
    from engines.mlx_lm import MLX, check_folder, require_mlx

    require_mlx()
    source = None
    embedded = model is None
    if model is None or is_gguf(Path(model)):
        gguf = embedded_model_path(progress) if model is None else Path(model)
        info = read_gguf(gguf, progress)
        if info.architecture not in SUPPORTED_ARCHITECTURES:
            raise unsupported(gguf.name, info.architecture)
        folder = convert_gguf(gguf, progress=progress)
        source = str(gguf)
        name = EMBEDDED_NAME.replace("(embedded)", "(embedded, mlx float32)") if embedded else f"{info.name} (mlx)"
    else:
        folder = Path(model)
    config = check_folder(folder)
    text = config.get("text_config", config)
    try:
        shape = shape_from_config(folder / "config.json")  # the attention shape, weights = the safetensors
    except GuardError as exc:
        raise EngineError(str(exc)) from None
    info = GGUFInfo(path=str(folder), file_bytes=shape.weight_bytes, architecture=str(config["model_type"]),
                    name=shape.name, layers=shape.layers, kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                    context_length=text.get("max_position_embeddings"))
    if source is None:
        name = info.name
    dtype = str(text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
    return ModelChoice(folder, name, info.file_bytes, info, embedded,
                       kv_element_bytes=_DTYPE_BYTES.get(dtype, 2.0), source=source, kv_layout=MLX.kv_layout)


def build_spec(engine: str, choice: ModelChoice, threads: int | None, ctx: int, k: int,
               flash_attn: bool = True, progress: Callable[[str], None] | None = None,
               n_gpu_layers: int | None = None) -> EngineSpec:
    if ctx < 16:
        raise EngineError(f"--ctx {ctx} is too small; give at least 16 tokens (default 2048)")
    e = declared(engine)
    options = {}
    if e.own_blas:
        from engines.mlx_blas import prepare

        blas = prepare()
        options = {"mlx_blas_shim": blas.shim, "mlx_openblas": blas.openblas, "blas": blas.label,
                   "blas_kernel": blas.kernel}
        (progress or (lambda msg: print(msg, flush=True)))(f"mlx BLAS: {blas.label}")
    if not e.flash_attn:
        flash_attn = False  # a llama.cpp setting; mlx picks its own attention kernel
    if n_gpu_layers is not None and e.gpu != "layers":
        raise EngineError(f"--n-gpu-layers applies to --engine llama (mlx runs where mlx puts it), not {engine}")
    if n_gpu_layers is not None and n_gpu_layers < -1:
        raise EngineError(f"--n-gpu-layers {n_gpu_layers}: give -1 (all), 0 (none) or a number of layers")
    return EngineSpec(engine=engine, model_path=str(choice.path), threads=threads or auto_threads(k), ctx=ctx,
                      flash_attn=flash_attn, n_gpu_layers=n_gpu_layers, options=options)


def run_header(choice: ModelChoice, spec: EngineSpec, extra: Mapping[str, object]) -> dict[str, Any]:
    from measure.machine.envinfo import environment

    return {
        "environment": environment(),
        "engine": spec.engine,
        "engine_settings": engine_settings(spec),
        "model": choice.name,
        "model_path": str(choice.path),
        "model_bytes": choice.file_bytes,
        "model_sha256_prefix": sha256_prefix(choice.path),
        **({"converted_from": choice.source, "converted_from_sha256_prefix": sha256_prefix(choice.source)}
           if choice.source else {}),
        "simulated": False,
        **extra,
    }


def engine_settings(spec: EngineSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"threads": spec.threads, "ctx": spec.ctx, "seed": spec.seed}
    e = declared(spec.engine)
    if e.flash_attn:
        out["flash_attn"] = spec.flash_attn
    if e.gpu == "layers":
        out["layers"] = llama_placement(spec.n_gpu_layers)
    if "kv_type" in spec.options:  # llama: the KV cache's element type asked (engines/llama_cpp.kv_types)
        out["kv_type"] = spec.options["kv_type"]
    if "blas" in spec.options:  # mlx: what its matmuls ran on (engines/mlx_blas.py)
        from engines.mlx_blas import blas_env

        out["blas"] = spec.options["blas"]
        if spec.options.get("mlx_blas_shim"):  # OpenBLAS: its kernels, its threads per worker, its variables
            out.update(blas_kernel=spec.options.get("blas_kernel"), blas_threads=spec.threads, blas_env=blas_env())
    return out


def llama_placement(n_gpu_layers: int | None) -> str:
    """Where the llama engine's layers run with this --n-gpu-layers, asked of the installed llama.cpp."""
    try:
        import llama_cpp

        from engines.llama_cpp import placement
    except ImportError:
        return "unknown (llama-cpp-python not installed)"
    return placement(llama_cpp, n_gpu_layers)


def gpu_share(engine: str, n_gpu_layers: int | None) -> float:
    """The part of a local engine's footprint its GPU wires (docs/design/model-reads.md): the llama engine's layers as this
    llama.cpp build offloads them (none without a GPU backend), mlx on a Mac all of it (mlx on Linux runs on the
    CPU); 1 for anything else (a server's: not ours to say)."""
    gpu = declared(engine).gpu
    if gpu == "layers":
        try:
            import llama_cpp

            from engines.llama_cpp import offloaded_fraction
        except ImportError:
            return 0.0
        return offloaded_fraction(llama_cpp, n_gpu_layers, None)
    if gpu == "mac":
        from measure.machine.host import is_mac

        return 1.0 if is_mac() else 0.0
    return 1.0


def engine_label(engine: str) -> str:
    """The name records and screens show for an --engine value."""
    e = ENGINES.get(engine)  # a recording's engine may be one this build does not have
    return e.label if e else engine


def run_meta(engine: str, choice: ModelChoice, mode: Mode = "instances", b: int = 1) -> RunMeta:
    return RunMeta(engine=engine_label(engine), model=choice.name,
                   model_bytes=choice.file_bytes, mode=mode, b=b)
