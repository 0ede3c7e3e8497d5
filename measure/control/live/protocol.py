"""What the dashboard (tui/app.py) calls on its controller, declared once: `LiveController` (live.py) and
`ReplayController` (replay.py) both satisfy it, and the app is typed against it, so `make lint` (mypy)
refuses a controller that lacks a member the app uses, and tests/contract/test_controller.py checks both at run time.

A replay runs no engine: its K, B and mode are what the recording shows, and its key actions that would
change them refuse (`set_k`, `set_b`, `toggle_mode` return the refusal, as the live ones do when a change
is not possible). The replay's own keys (speed, seek) are on ReplayController alone: only ReplayApp uses them.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from measure.control.live.controller import LiveSettings
    from measure.control.live.snapshot import RunInfo, Snapshot
    from measure.sources.base import Capabilities


class Controller(Protocol):
    """Read-only members are properties here so that a plain attribute (live) and a property (replay,
    delegating to the controller it replays into) both satisfy them."""

    # ---- what the screen reads ------------------------------------------------------------------
    @property
    def info(self) -> RunInfo: ...

    @property
    def settings(self) -> LiveSettings: ...

    @property
    def caps(self) -> Capabilities: ...

    @property
    def mode(self) -> str: ...

    @property
    def k(self) -> int: ...

    @property
    def b(self) -> int: ...

    @property
    def totals(self) -> dict[str, int]: ...  # requests, errors, tokens since start (--peer's client row)

    def snapshot(self) -> Snapshot | None: ...

    def banner(self) -> str | None: ...

    # ---- what the keys call (any of them may return a refusal to show instead of acting) --------
    def set_k(self, k: int) -> str | None: ...

    def set_b(self, b: int) -> str | None: ...

    def toggle_mode(self) -> str | None: ...

    def toggle_pause(self) -> None: ...

    def reset_stats(self) -> None: ...

    def export(self, path: str | Path | None = None) -> Path: ...

    def log(self, level: str, text: str) -> None: ...

    def close(self) -> None: ...
