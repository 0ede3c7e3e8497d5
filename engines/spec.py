"""What an engine declares: the one object the rest of the code asks about an engine (docs/design/shape.md).

Each engine module holds its own declaration beside its code (engines/llama_cpp.py: LLAMA and LLAMA_SERVER,
engines/mlx_lm.py: MLX and MLX_SERVER, engines/vllm.py: VLLM, engines/http_openai.py: HTTP, engines/null.py: NULL);
engines/registry.py collects them
by name. A declaration is data: names of kinds the layers above act on (how its model is found, where its work
model is read, what the probe gives it), never code of theirs (engines sits below measure: nothing here imports
it). A new engine is its module with its declaration, one line in engines/registry.py, and --engine's choices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Where the engine runs: in worker processes of ours (engines.base.Engine, built from `factory`); a server of its
# own that tune starts on loopback; a server of someone else's, reached at --url.
Runs = Literal["in-process", "server", "remote"]
# What --model names: a GGUF file; an mlx-lm folder (or a GGUF converted to one); nothing (a server's own, or
# no model at all).
ModelKind = Literal["gguf", "mlx", "none"]
# Where measure/core/work.py reads the model's work: the GGUF header, the folder's config.json; none (not ours).
WorkModel = Literal["gguf", "config", "none"]
# What the roofline takes of the machine probe (measure/machine/ceilings.py): the engine's own rates on the model
# (the probe's kernels are llama.cpp's), or the bandwidth ceiling only.
Probe = Literal["engine-rates", "bandwidth"]
# Where its layers run: as --n-gpu-layers asks llama.cpp ("layers"); on the GPU on a Mac, else the CPU
# ("mac"); not ours to say, counted as all of it ("server").
Gpu = Literal["layers", "mac", "server"]
# tune's knobs beyond the shape (K, B, threads), each varied one at a time from the defaults
Knob = Literal["flash_attn", "kv_type", "ubatch", "prompt_concurrency"]
# tune's ways of taking concurrent requests: K engines of one request each, K engines batching B, one server's
# parallel slots, K servers behind one queue
TuneMode = Literal["instances", "batch", "slots", "servers"]
# the flags a server of its own takes for tune's slots and knobs (tune/space.py's SERVER_FLAGS): llama-server's
# (-np, -c, -t, -fa, -ctk/-ctv, -ub), mlx_lm.server's (--decode-concurrency, --prompt-concurrency) or vLLM's
# (--max-num-seqs, --max-model-len)
ServerFlags = Literal["", "llama-server", "mlx_lm.server", "vllm"]


@dataclass(frozen=True)
class EngineDecl:
    """One engine as the rest of the code sees it."""

    name: str  # the --engine value
    label: str  # the name records and screens show
    runs: Runs
    model_kind: ModelKind = "none"
    work_model: WorkModel = "none"
    kv_layout: str = "full"  # how it holds windowed layers' KV (measure/core/work.KV_LAYOUTS)
    probe: Probe = "bandwidth"
    gpu: Gpu = "server"
    factory: str = ""  # in-process: "module:Class" a worker builds (engines.registry.make_engine)
    plan_as: str = ""  # the engine whose run plan (model, memory budget, roofline) it is measured under; "": its own
    simulated: bool = False  # a schedule, not a measurement: its records say simulated
    flash_attn: bool = False  # takes llama.cpp's flash-attention switch (--no-flash-attn)
    kv_types: bool = False  # takes a KV cache type in its options (kv_type: f16, q8_0, q4_0; compare's --kv-type)
    own_blas: bool = False  # picks its BLAS before its workers start (engines/mlx_blas.py)
    tune_modes: tuple[TuneMode, ...] = ()  # empty: tune does not take it
    tune_half_threads: bool = False  # tune tries half the cores per engine too, not only all of them
    tune_knobs: tuple[Knob, ...] = ()
    serve_argv: tuple[str, ...] = ()  # the command serving a model of it on loopback: {model}, {port}; argv[0]
    # is the default program (serve() takes another)
    server_flags: ServerFlags = ""  # a server tune starts: the flags its slots and knobs are given as
    measure_flags: tuple[str, ...] = ()  # what tune adds when it measures it (not in the serve command): --metrics
    needs: str = ""  # the Python module it cannot run without: tune names it skipped, with why, where it is missing

    @property
    def in_process(self) -> bool:
        return self.runs == "in-process"

    @property
    def remote(self) -> bool:
        """A server of its own at --url: no model, memory or workers of ours."""
        return self.runs == "remote"

    @property
    def starts_server(self) -> bool:
        return self.runs == "server"

    @property
    def plan_engine(self) -> str:
        """The --engine value of the run plan it is measured under."""
        return self.plan_as or self.name

    @property
    def gguf_tokenizer(self) -> bool:
        """Its --model is a GGUF, whose tokenizer can make a server's prompt ids (--tokenizer)."""
        return self.model_kind == "gguf"

    def serve(self, model: str, port: int, program: str | None = None) -> list[str]:
        """The command line that serves `model` on 127.0.0.1:`port` (ValueError: it has none)."""
        if not self.serve_argv:
            raise ValueError(f"engine {self.name} has no server command of its own")
        argv = [a.format(model=model, port=port) for a in self.serve_argv]
        return [program or argv[0], *argv[1:]]
