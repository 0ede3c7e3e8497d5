"""`inference-top tune`: the best way to serve this model on this machine under this SLO, measured
(docs/design/tune.md).

The configurations the chosen engines really take are laid out as candidates: in-process llama.cpp as K
instances or K engines batching B, threads per worker; llama-server with N parallel slots and its threads;
mlx as instances or a batch; mlx_lm.server batching B (--decode-concurrency) and vLLM's B sequences (where vLLM
is installed: else named skipped, with why). Each is priced by the memory guard (over the budget: a row that says so) and
predicted by the roofline (core/roofline.py): the prediction orders them and prunes those it predicts cannot
win (their predicted tok/s under PRUNE of the best predicted goodput). The roofline has no term for flash
attention, the KV cache's type, llama-server's n_ubatch or mlx_lm.server's prompts prefilled at once, so those knobs are tried one at a time on the best
measured shape of each engine after the first round. Then successive halving: every survivor runs the same
closed loop (the same users, workload, seed and max_tokens) for `requests` requests, the better half by goodput
under the SLO runs again with twice the requests, and so on until one is left or the budget is spent. Each run
is a bench cell (sweep.CellRunner), its raw records in runs/<candidate>-n<requests>.jsonl; a candidate that
crashes, times out or is refused is a row with its reason, and whatever the budget left untried is listed.

The search is a pure function of `measure(candidate, requests)` and a clock, so it is tested with the null
engine and a planted best configuration; `tune --resume OUT` reads the runs in OUT/tune.json back as measured
and goes on from there.

Its jobs, one module each: space (the candidates, their settings, prediction and memory refusal), search (the
search; rows: a candidate's row and its runs; live: the live tune's keys and view), text (the answer in words and
its command lines), record (tune.json written and read back), runs (runs that start engines and servers, and
run_tune).
"""
from measure.control.tune.live import TuneControl, TuneRowView, TuneView
from measure.control.tune.record import TuneResult, load_done, write_result
from measure.control.tune.runs import cell_measure, local_opener, run_tune, server_opener, winner_knee
from measure.control.tune.search import Tune, TuneIO
from measure.control.tune.space import (ENGINES, Candidate, Predicted, Settings, TuneError, candidates, memory_refusal,
                                        parse_budget, roofline_predictor, unavailable)
from measure.control.tune.text import Serving, bench_command, format_result, serve_command

__all__ = ["ENGINES", "TuneControl", "TuneIO", "TuneView", "TuneRowView", "Candidate", "Predicted", "Settings", "Tune",
           "TuneResult", "TuneError", "candidates", "cell_measure", "format_result", "local_opener", "server_opener",
           "load_done", "memory_refusal", "parse_budget", "roofline_predictor", "serve_command", "bench_command",
           "write_result", "run_tune", "winner_knee", "unavailable", "Serving"]
