"""vLLM's server as tune starts it: its declaration only (engines/spec.py). Its client is engines/http_openai.py,
as every server's; vLLM is not a dependency of this project: where `vllm` is not installed, tune names it
skipped with why (measure/control/tune/space.unavailable), never silently."""
from __future__ import annotations

from engines.spec import EngineDecl

# `vllm serve` on loopback: B sequences at once (--max-num-seqs), the context each request needs (--max-model-len);
# its model is the GGUF llama's run plan chose (vLLM reads GGUF files; its tokenizer is the file's own)
VLLM = EngineDecl("vllm", "vLLM", "server", model_kind="gguf", work_model="gguf", kv_layout="full", plan_as="llama",
                  tune_modes=("slots",), server_flags="vllm", needs="vllm",
                  serve_argv=("vllm", "serve", "{model}", "--host", "127.0.0.1", "--port", "{port}"))
