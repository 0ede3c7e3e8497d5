"""run_dashboard's parts beside RunPlan (issue 23: 5): live/start.start_live starts what the dashboard drives — the
source, the recording, the controller, /metrics — and LiveRun.close stops them; tui/app.py only runs the screen."""
import json
import time
import urllib.request

import pytest

from conftest import NullServerProcess, free_port


def test_start_live_starts_the_dashboards_parts_and_close_stops_them(tmp_path):
    from measure.control.live.controller import LiveController
    from measure.control.builder import make_plan
    from tui.options import plan_options
    from measure.control.live.start import start_live
    from tui.options import build_parser

    srv = NullServerProcess(ttft_ms=5.0, itl_ms=5.0)
    try:
        dash, _ = build_parser()
        plan = make_plan(plan_options(dash.parse_args(["--engine", "http", "--url", srv.url, "--tokenizer", "none",
                                          "--max-tokens", "4"])), default_max_tokens=8)
        port, rec = free_port(), tmp_path / "session.jsonl"
        run = start_live(plan, str(rec), True, ("127.0.0.1", port), None)
        try:
            assert isinstance(run.controller, LiveController) and run.title
            body, end = "", time.monotonic() + 15
            while "inference_top_" not in body and time.monotonic() < end:  # once the sampler has published
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                time.sleep(0.2)
            assert "inference_top_" in body
            assert json.loads(rec.read_text().splitlines()[0])["command"] == "dashboard"
        finally:
            run.close()
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    finally:
        srv.kill()
