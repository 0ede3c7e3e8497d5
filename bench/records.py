"""The per-request record (shared/DESIGN.md section 3): one JSONL line per finished or failed request."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestRecord:
    run_id: str
    request_id: int
    mode: str  # instances | batch | http
    engine: str
    model: str
    model_bytes: int
    k: int
    b: int
    worker: int | None = None
    prompt_id: str = ""
    prompt_tokens: int = 0
    output_tokens: int = 0
    t_scheduled_ns: int = 0
    t_submitted_ns: int = 0
    t_started_ns: int | None = None
    t_first_token_ns: int | None = None
    t_done_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    simulated: bool = False
    # beyond DESIGN section 3
    rep: int = 0
    pid: int | None = None
    threads: int | None = None
    worker_rss_bytes: int | None = None
    kind: str = "request"
    # http mode: the server's own count where it differs from the streamed chunks, and its view
    server_output_tokens: int | None = None
    server_view: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RequestRecord":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})
