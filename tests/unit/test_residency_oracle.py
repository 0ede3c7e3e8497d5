"""core/residency.py by hand: the parsers over small texts written here, a residency between two readings, the
residency roofline's step, which memory gives out first and a level past the wall, each figure worked out in the
comments (benchmarks/mutation.py runs these against the module's mutants)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from measure.core import residency as R
from measure.core.units import GiB, MiB

KB = 1024


# ---- parsers ----------------------------------------------------------------------------------------------
def test_parse_kb_reads_key_kb_lines_only() -> None:
    text = "Rss:     100 kB\nSwap:  2 kB\nVmSwap(x):   3 kB\n Indented: 9 kB\nPages: 5\nTotal: 7 MB\n"
    assert R.parse_kb(text) == {"Rss": 100 * KB, "Swap": 2 * KB, "VmSwap(x)": 3 * KB}


def test_parse_counters_both_forms_and_negatives() -> None:
    text = "pswpin 10\npgmajfault: 5\nthree words here\nneg -3\nx 1.5\nalone\ny a\n"
    assert R.parse_counters(text) == {"pswpin": 10, "pgmajfault": 5, "neg": -3}


SMAPS = """\
7f0000000000-7f0000400000 r--s 00000000 fd:01 42 /m/my model.gguf
Size:               4096 kB
Rss:                1024 kB
Swap:                  4 kB
VmFlags: rd sh mr mw me ms
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                1000 kB
Swap:                 24 kB
7f0000500000-7f0000600000 r--p 00400000 fd:01 42 /m/my model.gguf
Size:               1024 kB
Rss:                 512 kB
Swap:                  8 kB
Pss:                 256 kB
7f0000580000-7f0000590000 rwxp 00000000 00:00 0
Size:                 64 kB
Rss:                  64 kB
Swap:                 16 kB
7f0000600000-7f0000700000 r--p 00000000 fd:01 43 /m/other.gguf
Size:               1024 kB
Rss:                1024 kB
Swap:                  4 kB
"""


def test_parse_smaps_of_sums_the_mappings_of_one_path() -> None:
    # two mappings of the model: 4096 + 1024 kB mapped, 1024 + 512 resident, 4 + 8 swapped; the anonymous
    # mappings (no path; one rwxp, a header whose permissions hold no '-') and the other file are not counted
    assert R.parse_smaps_of(SMAPS, "/m/my model.gguf") == (5120 * KB, 1536 * KB, 12 * KB)
    assert R.parse_smaps_of(SMAPS, "/m/other.gguf") == (1024 * KB, 1024 * KB, 4 * KB)
    assert R.parse_smaps_of(SMAPS, "/m/none") == (0, 0, 0)


def test_parse_maps_of_sums_address_ranges() -> None:
    maps = "\n".join(line for line in SMAPS.splitlines() if "-" in line.split()[0] and ":" not in line.split()[0])
    assert R.parse_maps_of(maps, "/m/my model.gguf") == 0x400000 + 0x100000
    assert R.parse_maps_of(maps, "/m/other.gguf") == 0x100000
    assert R.parse_maps_of(maps, "/m/none") == 0


def test_parse_majflt_is_the_twelfth_field_past_a_command_with_parens() -> None:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt ...
    assert R.parse_majflt("123 (py thon) S 1 2 3 4 5 6 7 8 42 9 10") == 42
    assert R.parse_majflt("7 (a) b) R 1 2 3 4 5 6 70 80 43 0") == 43


def test_parse_psi_reads_some_avg10() -> None:
    text = "some avg10=1.50 avg60=2.00 avg300=0.00 total=1\nfull avg10=9.00 avg60=0 avg300=0 total=2\n"
    assert R.parse_psi(text) == 1.5
    assert R.parse_psi("full avg10=9.00 avg60=0 avg300=0 total=2\n") is None


# ---- a residency between two readings ----------------------------------------------------------------------
def _sys(t_s: float, pswpin: int, **kw: object) -> R.SysMemory:
    return R.SysMemory(int(t_s * 1e9), pswpin=pswpin, **kw)  # type: ignore[arg-type]


def test_residency_of_mmapped_weights_two_workers() -> None:
    w = 1000 * MiB
    prev = R.Reading(_sys(10.0, 100), (R.ProcMemory(1, 0, 10, 0, 0, w, 300 * MiB, majflt=5, read_bytes=1000),
                                      R.ProcMemory(2, 0, 20, 0, 0, w, 200 * MiB, majflt=1, read_bytes=0)), w, tokens=10)
    cur = R.Reading(_sys(12.0, 100 + 512, pressure=3.5, pressure_source="psi", cgroup_limit=7),
                    (R.ProcMemory(1, 0, 30, 4, 0, w, 600 * MiB, majflt=25, read_bytes=1000 + 4_000_000),
                     R.ProcMemory(2, 0, 50, 6, 0, w, 700 * MiB, majflt=11, read_bytes=2_000_000),
                     R.ProcMemory(3, 0, 5, 0, 0, w, 100 * MiB, majflt=99, read_bytes=99)), w, tokens=40)
    r = R.residency(prev, cur)
    # the page cache is shared: the most any worker maps in (700 MiB); one file's bytes, not three
    assert (r.weights_bytes, r.weights_resident, r.mmapped) == (w, 700 * MiB, True)
    assert r.weights_share == pytest.approx(0.7)
    assert (r.anon_resident, r.anon_swapped) == (85, 10)
    # faults and reads of the workers seen before only: (25 − 5) + (11 − 1) = 30 over 30 tokens
    assert r.majflt_per_token == pytest.approx(1.0)
    # 512 pages swapped in over 2 s: 512 × 4096 / 2 / 1e6 MB/s; 6,000,000 bytes read over 2 s
    assert r.swap_in_mbps == pytest.approx(512 * 4096 / 2 / 1e6)
    assert r.file_read_mbps == pytest.approx(3.0)
    assert (r.pressure, r.pressure_source, r.cgroup_limit) == (3.5, "psi", 7)
    assert r.workers[0] == {"pid": 1, "rss": 0, "anon": 30, "swap": 4, "weights_resident": 600 * MiB}
    assert len(r.workers) == 3
    # mincore's count of the file's pages, where read, over the workers' own
    cur2 = R.Reading(cur.sys, cur.procs, w, tokens=40, mincore_resident=900 * MiB)
    assert R.residency(prev, cur2).weights_resident == 900 * MiB


def test_residency_over_half_a_second_and_one_token() -> None:
    prev = R.Reading(_sys(1.0, 0), (R.ProcMemory(1, 0, 0, 0, 0, majflt=0, read_bytes=100),
                                   R.ProcMemory(2, 0, 0, 0, 0, majflt=0, read_bytes=100)), 10, tokens=5)
    cur = R.Reading(_sys(1.5, 10), (R.ProcMemory(1, 0, 0, 0, 0, majflt=3, read_bytes=100),
                                    R.ProcMemory(2, 0, 0, 0, 0, majflt=0, read_bytes=600_100)), 10, tokens=6)
    r = R.residency(prev, cur)
    # 10 pages in 0.5 s; 600 kB read in 0.5 s (the worker that read nothing adds nothing); 3 faults for 1 token
    assert r.swap_in_mbps == pytest.approx(10 * 4096 / 0.5 / 1e6) and r.file_read_mbps == pytest.approx(1.2)
    assert r.majflt_per_token == 3.0


def test_residency_rates_are_per_second_exactly() -> None:
    # 2 s between the readings (10 s → 12 s: 2e9 ns ÷ 1e9): 512 pages of 4096 B = 2,097,152 B ÷ 2 s = 1,048,576 B/s
    # = 1.048576 MB/s; 6,000,000 B read ÷ 2 s = 3 MB/s. Exact: a second is 1e9 ns, not a hair more
    prev = R.Reading(_sys(10.0, 100), (R.ProcMemory(1, 0, 0, 0, 0, read_bytes=1000),), 10)
    cur = R.Reading(_sys(12.0, 612), (R.ProcMemory(1, 0, 0, 0, 0, read_bytes=6_001_000),), 10)
    r = R.residency(prev, cur)
    assert (r.swap_in_mbps, r.file_read_mbps) == (1.048576, 3.0)

def test_residency_of_loaded_weights_swapped() -> None:
    w = 100
    prev = R.Reading(_sys(0.0, 0), (R.ProcMemory(1, 0, 0, 0, 0),), w, tokens=0)
    cur = R.Reading(_sys(0.0, 50), (R.ProcMemory(1, 0, 150, 30, 0), R.ProcMemory(2, 0, 150, 500, 0)), w, tokens=0)
    r = R.residency(prev, cur)
    # loaded: each worker's own copy; what is swapped of each comes off it (at most its weights): 200 − 30 − 100
    assert (r.weights_bytes, r.weights_resident, r.mmapped) == (200, 70, False)
    # no time and no tokens between them: no rates, no faults a token
    assert (r.swap_in_mbps, r.file_read_mbps, r.majflt_per_token) == (0.0, 0.0, None)
    none = R.residency(R.Reading(_sys(0, 0), (), 0), R.Reading(_sys(1, 0), (), 0))
    assert (none.weights_bytes, none.weights_resident, none.weights_share) == (0, 0, 1.0)


def test_fields_are_the_flat_record() -> None:
    r = R.Residency(1000, 333, True, 5, 6, 1.23456, 2.34567, 3.45678, 4.0, "psi", 99, ({"pid": 1},))
    assert r.fields() == {
        "weights_resident_bytes": 333, "weights_bytes": 1000, "weights_resident_share": 0.333,
        "weights_mmapped": True, "anon_resident_bytes": 5, "anon_swapped_bytes": 6, "major_faults_per_token": 1.23,
        "swap_in_mbps": 2.346, "file_read_mbps": 3.457, "memory_pressure": 4.0, "memory_pressure_source": "psi",
        "cgroup_limit_bytes": 99, "workers": [{"pid": 1}]}
    r2 = R.Residency(3, 1, False, 0, 0, None, 0.0, 0.0, None, "none")
    assert r2.fields()["major_faults_per_token"] is None and r2.fields()["weights_resident_share"] == 0.3333
    assert r2.fields()["cgroup_limit_bytes"] is None and r2.fields()["workers"] == []


# ---- macOS --------------------------------------------------------------------------------------------------
VM_STAT = """Mach Virtual Memory Statistics: (page size of 16384 bytes)
Pages free:                               1000.
Pages stored in compressor:                200.
Pages occupied by compressor:               50.
Swapins:                                    30.
Pageins:                                    40.
File-backed pages:                          60.
"""


def test_mac_vm_and_its_rates() -> None:
    v = R.mac_vm(VM_STAT)
    assert v == R.MacVm(16384, 200 * 16384, 50 * 16384, 30, 40, 60 * 16384)
    later = R.MacVm(16384, 0, 0, 130, 90, 0)
    # 100 swap-ins and 50 page-ins of 16 KiB over 2 s
    assert R.mac_rates(v, later, 2.0) == {"swap_in_mbps": pytest.approx(100 * 16384 / 2 / 1e6),
                                          "page_in_mbps": pytest.approx(50 * 16384 / 2 / 1e6)}
    assert R.mac_rates(later, v, 2.0) == {"swap_in_mbps": 0.0, "page_in_mbps": 0.0}  # a counter reset: none
    assert R.mac_rates(v, later, 0.0) == {"swap_in_mbps": 0.0, "page_in_mbps": 0.0}
    assert R.mac_vm(VM_STAT.replace("Pageins:                                    40.\n", "")).pageins == 0
    assert R.mac_rates(v, later, 0.5)["swap_in_mbps"] == pytest.approx(100 * 16384 / 0.5 / 1e6)


# ---- the residency roofline -------------------------------------------------------------------------------
def _rates(**kw: object) -> R.StorageRates:
    base: dict[str, object] = dict(where="/x", method="O_DIRECT", seq_gbps=2.0, rand_4k_mbps=70.0,
                                   swap_cluster_bytes=32768, swap_mbps=400.0, mmap_gbps=3.0, mmap_fault_bytes=5e5,
                                   minor_fault_us=0.5, read_ahead_bytes=131072)
    return R.StorageRates(**(base | kw))  # type: ignore[arg-type]


def test_nonresident_bytes_by_hand() -> None:
    assert R.nonresident_bytes(100, 100) == 0.0 and R.nonresident_bytes(100, 150, 0.0) == 0.0
    assert R.nonresident_bytes(100, 100, 0.0) == 0.0  # exactly the room: it fits, nothing comes back
    assert R.nonresident_bytes(100, 60) == 40.0  # only the excess (kept 1)
    assert R.nonresident_bytes(100, 60, 0.0) == 100.0  # everything touched (kept 0: LRU's worst case)
    assert R.nonresident_bytes(100, 60, 0.5) == 70.0
    assert R.nonresident_bytes(100, -20, 1.0) == 100.0  # no room at all


def test_reread_rate_order() -> None:
    full = _rates(reread_file_mbps=3000.0, reread_swap_mbps=1600.0, memcg_file_mbps=2000.0, memcg_swap_mbps=300.0)
    assert R.reread_rate(full, True) == (2000.0e6, "a sweep of an mmap'ed file in a memory cgroup")
    assert R.reread_rate(full, False) == (300.0e6, "a sweep of swapped pages in a memory cgroup")
    no_group = _rates(reread_file_mbps=3000.0, reread_swap_mbps=1600.0)
    assert R.reread_rate(no_group, True) == (3000.0e6, "a sweep of an mmap'ed file paging out behind itself")
    # swap never from the sweep that pages out behind itself (read back in order): random cluster reads
    assert R.reread_rate(no_group, False) == (400.0e6, "random 32 KiB reads (a swap cluster)")
    assert R.reread_rate(_rates(), True) == (3.0e9, "an mmap'ed file faulted in")


def test_residency_step_by_hand() -> None:
    # 200 MB touched, room 150 MB, KEPT 0: all 200 MB come back. A cgroup's file sweep at 2000 MB/s: 0.1 s, its
    # faults inside the sweep's rate: t_step = 0.02 + 0.1
    s = R.residency_step(0.02, 200e6, 150e6, _rates(memcg_file_mbps=2000.0), True)
    assert s.nonresident_bytes == 200e6 and s.t_io_s == pytest.approx(0.1) and s.t_faults_s == 0.0
    assert s.t_step_s == pytest.approx(0.12) and s.slowdown == pytest.approx(6.0) and s.binding == "storage"
    assert s.via == "page cache (mmap'ed weights re-read) at 2000 MB/s (a sweep of an mmap'ed file in a memory cgroup)"
    assert s.faults == pytest.approx(200e6 / 4096)
    # swap at plain random cluster reads (400 MB/s): 0.5 s, and a minor fault a page (0.5 µs × 48828.125)
    s2 = R.residency_step(0.02, 200e6, 150e6, _rates(), False)
    assert s2.t_io_s == pytest.approx(0.5) and s2.t_faults_s == pytest.approx(200e6 / 4096 * 0.5e-6)
    assert s2.t_step_s == pytest.approx(0.02 + 0.5 + 200e6 / 4096 * 0.5e-6)
    assert s2.via.startswith("swap (anonymous pages) at 400 MB/s (random 32 KiB reads")
    # it fits, or no rates: the resident step, nothing brought back
    fits = R.residency_step(0.02, 100e6, 150e6, _rates(), True)
    assert (fits.nonresident_bytes, fits.t_step_s, fits.via, fits.slowdown) == (0.0, 0.02, "none", 1.0)
    assert (fits.t_io_s, fits.faults, fits.t_faults_s) == (0.0, 0.0, 0.0)
    blind = R.residency_step(0.02, 200e6, 150e6, None, True)
    assert (blind.nonresident_bytes, blind.t_io_s, blind.t_step_s) == (200e6, 0.0, 0.02)
    # the reads beside the kernels (a Mac): max(resident, io) + faults
    over = R.ResidencyStep(0.3, 1.0, 0.2, 0.0, 0.01, "x", overlap=True)
    assert over.t_step_s == pytest.approx(0.31) and over.binding == "memory bandwidth / compute"
    assert R.ResidencyStep(0.0, 0.0, 0.0, 0.0, 0.0, "none").slowdown == 1.0


# ---- which memory gives out first ---------------------------------------------------------------------------
def test_gives_out_names_each_memory_with_its_headroom() -> None:
    # the machine: 10 GiB available of 32; a request's KV 1 GiB
    lim = R.MemoryLimits(physical=32 * GiB, available=10 * GiB, swap_total=0, swap_free=0, mmapped=True)
    g = R.gives_out(lim, held=5 * GiB, per_unit=1 * GiB)
    assert g.memory == "the page cache holding the mmap'ed model (weights evicted and re-read from the file: no swap)"
    assert (g.headroom, g.units, g.unit, g.limit) == (10 * GiB, 10, "requests", "10.0 GiB available of 32.0 GiB")
    # loaded weights, swap free / none
    lim_swap = R.MemoryLimits(32 * GiB, 10 * GiB, swap_total=4 * GiB, swap_free=1, mmapped=False)
    assert R.gives_out(lim_swap, 0).memory == "anonymous pages (KV, loaded weights) swapped"
    lim_oom = R.MemoryLimits(32 * GiB, 10 * GiB, swap_total=4 * GiB, swap_free=0, mmapped=False)
    assert R.gives_out(lim_oom, 0).memory == "anonymous memory with no swap (the OOM killer)"
    # a cgroup limit below the room: its usage counts; named with the group
    cg = R.MemoryLimits(32 * GiB, 10 * GiB, cgroup_limit=8 * GiB, cgroup_usage=6 * GiB, mmapped=False, swap_free=1)
    g = R.gives_out(cg, held=1 * GiB, per_unit=0.5 * GiB, unit="tokens")
    assert (g.headroom, g.units, g.unit, g.limit) == (2 * GiB, 4, "tokens", "cgroup memory limit 8.0 GiB")
    assert g.memory == ("cgroup memory limit: anonymous pages (KV, loaded weights) swapped, or the OOM killer: in a "
                        "group a little past its limit the kernel kills a decoder whose every page it just used "
                        "(mmap'ed weights are re-read instead)")
    # mmap'ed in the group, or no swap: no such clause
    assert R.gives_out(replace(cg, mmapped=True), held=1 * GiB).memory.startswith("cgroup memory limit: the page cache")
    assert R.gives_out(replace(cg, swap_free=0), held=1 * GiB).memory == (
        "cgroup memory limit: anonymous memory with no swap (the OOM killer)")
    # usage unknown: what the load holds
    cg2 = R.MemoryLimits(32 * GiB, 10 * GiB, cgroup_limit=8 * GiB, mmapped=True)
    assert R.gives_out(cg2, held=7 * GiB).headroom == 1 * GiB
    # a cgroup limit with more room than the machine has: the machine's
    cg3 = R.MemoryLimits(32 * GiB, 1 * GiB, cgroup_limit=16 * GiB, cgroup_usage=0, mmapped=True)
    assert R.gives_out(cg3, 0).limit == "1.0 GiB available of 32.0 GiB"
    # the group's room exactly the machine's: the group is named (it is the nearer limit to watch)
    even = R.MemoryLimits(32 * GiB, 2 * GiB, cgroup_limit=8 * GiB, cgroup_usage=6 * GiB, mmapped=True)
    assert R.gives_out(even, 0).limit == "cgroup memory limit 8.0 GiB"
    mac_even = R.MemoryLimits(48 * GiB, 5 * GiB, mac_working_set=20 * GiB, mac_wired=15 * GiB)
    assert R.gives_out(mac_even, 0).memory == "Metal's wired working-set limit"
    # a cgroup limit at or above the physical memory is no limit
    cg4 = R.MemoryLimits(32 * GiB, 10 * GiB, cgroup_limit=32 * GiB, cgroup_usage=30 * GiB, mmapped=True)
    assert R.gives_out(cg4, 0).headroom == 10 * GiB
    # past it: negative headroom, 0 units
    past = R.gives_out(R.MemoryLimits(32 * GiB, 10 * GiB, cgroup_limit=8 * GiB, cgroup_usage=9 * GiB), 0, 1 * GiB)
    assert (past.headroom, past.units) == (-1 * GiB, 0)
    assert past.line() == ("cgroup memory limit: the page cache holding the mmap'ed model (weights evicted and "
                           "re-read from the file: no swap): past it by 1.0 GiB (cgroup memory limit 8.0 GiB)")
    assert R.gives_out(lim, 0).units is None


def test_gives_out_counts_whole_units_of_any_size() -> None:
    lim = R.MemoryLimits(physical=32 * GiB, available=1 * GiB, mmapped=True)
    # a request of 0.1 GiB: 0.1 is stored as 0.1000000000000000055511…, so 0.1 GiB is 107,374,182.40000000596 B and
    # ten of them 1,073,741,824.0000000596 B, over the 1 GiB of room: 9 fit (the rounded quotient says 10.0)
    assert R.gives_out(lim, 0, per_unit=0.1 * GiB).units == 9
    # units of one byte: the headroom itself, 2^30; past the limit, 0 of them
    one = R.gives_out(lim, 0, per_unit=1.0, unit="bytes")
    assert (one.headroom, one.units) == (GiB, 1_073_741_824)
    assert one.line() == ("the page cache holding the mmap'ed model (weights evicted and re-read from the file: no "
                          "swap) in 1.0 GiB = 1,073,741,824 bytes (1.0 GiB available of 32.0 GiB)")
    past = R.MemoryLimits(32 * GiB, 10 * GiB, cgroup_limit=8 * GiB, cgroup_usage=9 * GiB)
    assert (R.gives_out(past, 0, per_unit=1.0).headroom, R.gives_out(past, 0, per_unit=1.0).units) == (-GiB, 0)

def test_gives_out_on_a_mac() -> None:
    # Metal's working set 20 GiB, 15 wired: 5 GiB left, below the 10 available
    mac = R.MemoryLimits(48 * GiB, 10 * GiB, mac_working_set=20 * GiB, mac_wired=15 * GiB, mac_compressed=2 * GiB)
    g = R.gives_out(mac, held=1 * GiB, per_unit=2 * GiB)
    assert (g.memory, g.headroom, g.units, g.limit) == ("Metal's wired working-set limit", 5 * GiB, 2,
                                                        "working set 20.0 GiB")
    assert g.line() == "Metal's wired working-set limit in 5.0 GiB = 2 requests (working set 20.0 GiB)"
    # wired unknown: what the load holds; more room in the working set than available: the compressor
    roomy = R.MemoryLimits(48 * GiB, 4 * GiB, mac_working_set=40 * GiB, mac_compressed=2 * GiB)
    g = R.gives_out(roomy, held=30 * GiB)
    assert (g.memory, g.headroom, g.unit) == ("compressed memory (macOS's compressor, then swap)", 4 * GiB, "requests")
    assert g.limit == "4.0 GiB available of 48.0 GiB, 2.0 GiB compressed now"
    assert R.gives_out(R.MemoryLimits(48 * GiB, 4 * GiB, mac_working_set=40 * GiB), 30 * GiB).limit == \
        "4.0 GiB available of 48.0 GiB"
    assert R.gives_out(R.MemoryLimits(48 * GiB, 4 * GiB, mac_working_set=40 * GiB), 37 * GiB).headroom == 3 * GiB


# ---- a level past the wall -------------------------------------------------------------------------------------
def test_level_fit_by_hand() -> None:
    # K = 2 engines of B = 4: weights 100 + runtime 10 each, 5 a sequence: working set 2 × 110 + 8 × 5 = 260.
    # Touched 230 a step; room 200: the 30 not touched go first, 170 left for the 230 touched: all 230 back
    # (KEPT 0) at 400 MB/s (bytes in MB here: 230e6 / 400e6 s) + a minor fault a page
    mem = R.LevelMemory(weights=100e6, overhead=10e6, per_seq=5e6, mmapped=False)
    lv = R.level_fit("B=4", (2, 4), 0.01, 230e6, mem, 200e6, _rates())
    assert lv.working_set == pytest.approx(260e6) and lv.room == 200e6 and not lv.fits
    io = 230e6 / 400e6
    faults = 230e6 / 4096 * 0.5e-6
    assert lv.step.t_step_s == pytest.approx(0.01 + io + faults)
    assert lv.tps == pytest.approx(8 / (0.01 + io + faults))
    # room for it all: fits, the resident step
    ok = R.level_fit("B=4", (2, 4), 0.01, 230e6, mem, 300e6, _rates())
    assert ok.fits and ok.tps == pytest.approx(800.0)
    assert R.level_fit("x", (1, 1), 0.01, 1.0, R.LevelMemory(1.0, 0.0, 0.0), 1.0, None).fits
    # a Mac not probed: only the excess at the assumed rate, beside the kernels: 230 − 170 = 60 at 3 GB/s
    mac = R.level_fit("B=4", (2, 4), 0.01, 230e6, mem, 200e6, None, assumed_bps=3e9)
    assert mac.step.nonresident_bytes == pytest.approx(60e6) and mac.step.overlap
    assert mac.step.t_step_s == pytest.approx(max(0.01, 60e6 / 3e9))
    assert mac.step.via == "swap at 3 GB/s (assumed)"
    assert (mac.step.faults, mac.step.t_faults_s) == (0.0, 0.0)
    fits_mac = R.level_fit("B=1", (1, 1), 0.01, 10e6, mem, 400e6, None, assumed_bps=3e9)
    assert fits_mac.step.via == "none" and fits_mac.step.t_io_s == 0.0
    assert (fits_mac.step.nonresident_bytes, fits_mac.step.faults) == (0.0, 0.0)
    # mmap'ed weights: re-read from the file, not swapped
    mm = R.level_fit("B=4", (2, 4), 0.01, 230e6, R.LevelMemory(100e6, 10e6, 5e6, mmapped=True), 200e6,
                     _rates(memcg_file_mbps=2000.0))
    assert mm.step.via.startswith("page cache (mmap'ed weights re-read) at 2000 MB/s")
    assert mm.step.t_step_s == pytest.approx(0.01 + 230e6 / 2000e6)
    assert R.first_past([ok, lv, mac]) is lv and R.first_past([ok]) is None


def test_budget_skip_by_hand() -> None:
    assert R.budget_skip(0.0, 100, 10) is None
    assert R.budget_skip(10.0, 100, 10) is None  # 10 s: within
    assert R.budget_skip(2.0, 100, 10) == ("predicted 2.00 tok/s past the memory wall: 100 tokens would take 50 s, "
                                           "over the level's budget of 10 s; skipped")


def test_to_storage_round_trips_and_refuses_other_shapes() -> None:
    r = _rates(memcg_swap_mbps=300.0)
    from dataclasses import asdict

    assert R.to_storage(asdict(r)) == r
    assert R.to_storage(None) is None and R.to_storage({}) is None
    assert R.to_storage({"where": "x"}) is None  # fields missing: an older cache's shape
