"""Oracles for compare's statistics and verdicts (measure/control/bench/compare.py; docs/design/compare.md): Student's
t without scipy checked against published t-table values, the exact closed forms of 1, 2, 3 and 4 degrees of freedom
and a numpy integration of the t density; each interval, look and detectable difference worked out by hand on a tiny
case; every boundary tried on both sides and every verdict read for the figures it names. Pure: no source, no disk,
no timing (the rounds' driver and the two live sides: tests/integration/test_compare.py)."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from measure.control.bench import compare as C
from measure.control.bench.answers import IDS, Agreement
from measure.core.records import RequestRecord
from presets import SLO

TOKS, TPOT, TTFT, GOOD = C.METRICS["tok/s"], C.METRICS["tpot"], C.METRICS["ttft-p99"], C.METRICS["goodput"]
LOOK1 = 0.05 * 6 / math.pi ** 2  # the first look's error rate: 0.030396…


# ---- independent references for Student's t -------------------------------------------------------------------
def sf2_closed(t: float, df: int) -> float:
    """P(|T| > t) in closed form: df 1 (Cauchy), 2, 3 and 4."""
    if df == 1:
        return 1 - 2 * math.atan(t) / math.pi
    if df == 2:
        return 1 - t / math.sqrt(2 + t * t)
    if df == 3:
        th = math.atan(t / math.sqrt(3))
        return 1 - 2 / math.pi * (th + math.sin(th) * math.cos(th))
    if df == 4:
        x = t / math.sqrt(4 + t * t)
        return 1 - x * (3 - x * x) / 2
    raise ValueError(df)


def sf2_numeric(t: float, df: float, n: int = 20000) -> float:
    """P(|T| > t) = 1 − 2 ∫₀ᵗ the t density (Simpson's rule over n intervals, numpy)."""
    x = np.linspace(0.0, t, n + 1)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = c * (1 + x * x / df) ** (-(df + 1) / 2)
    integral = (t / n) / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 1 - 2 * float(integral)


def q_ref(alpha: float, df: float) -> float:
    """The t with P(|T| > t) = alpha: closed form for df 1 and 2, else bisection on a closed form / numpy's."""
    if df == 1:
        return 1 / math.tan(math.pi * alpha / 2)
    if df == 2:
        return (1 - alpha) * math.sqrt(2 / (1 - (1 - alpha) ** 2))
    sf = (lambda t: sf2_closed(t, int(df))) if df in (3, 4) else (lambda t: sf2_numeric(t, df))
    lo, hi = 0.0, 1000.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sf(mid) > alpha else (lo, mid)
    return (lo + hi) / 2


def seq_of(ds, **kw) -> C.Sequential:
    """A Sequential whose rounds have these log ratios (A's two runs 1 and 1, B's two e^d)."""
    s = C.Sequential(**kw)
    for d in ds:
        s.add([1.0, 1.0], [math.exp(d)] * 2)
    return s


def sd_of(ds) -> float:
    return float(np.std(np.asarray(ds), ddof=1))


# ---- the metric and the share -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,name", [
    ("tok/s", "tok/s"), (" TPS ", "tok/s"), ("Throughput", "tok/s"), ("output_throughput", "tok/s"),
    ("goodput", "goodput"), ("goodput_tps", "goodput"), ("TPOT", "TPOT p50"), ("tpot-p50", "TPOT p50"),
    ("tpot_p50", "TPOT p50"), ("median_tpot_ms", "TPOT p50"), ("ttft", "TTFT p99"), ("TTFT-P99", "TTFT p99"),
    ("ttft_p99", "TTFT p99"), ("p99_ttft_ms", "TTFT p99")])
def test_metric_names_and_aliases(text, name):
    assert C.metric(text).name == name


def test_metric_fields_and_directions():
    assert (TOKS.field, TOKS.higher_is_better, TOKS.unit) == ("output_throughput", True, "tok/s")
    assert (GOOD.field, GOOD.higher_is_better, GOOD.unit) == ("goodput_tps", True, "tok/s")
    assert (TPOT.field, TPOT.higher_is_better, TPOT.unit) == ("median_tpot_ms", False, "ms")
    assert (TTFT.field, TTFT.higher_is_better, TTFT.unit) == ("p99_ttft_ms", False, "ms")


def test_an_unknown_metric_is_one_line_naming_the_four():
    with pytest.raises(C.CompareError) as e:
        C.metric(" Latency ")
    assert str(e.value) == "--metric ' Latency ': give one of tok/s, goodput, tpot, ttft-p99"


def test_parse_share_percent_or_fraction():
    assert C.parse_share("2%", "--precision") == 0.02  # 2 ÷ 100
    assert C.parse_share(" 12.5% ", "--precision") == 0.125
    assert C.parse_share("0.02", "--precision") == 0.02
    assert C.parse_share("99.9%", "--precision") == pytest.approx(0.999)
    assert C.parse_share("0.0001", "x") == 0.0001


@pytest.mark.parametrize("text", ["0", "0%", "1", "100%", "-0.5", "1.5", "-2%"])
def test_parse_share_outside_0_to_1_is_refused(text):
    with pytest.raises(C.CompareError) as e:
        C.parse_share(text, "--precision")
    assert str(e.value) == f"--precision {text!r}: give a share between 0 and 100 %, such as 2%"


@pytest.mark.parametrize("text", ["abc", "%", "2 %%", "two%"])
def test_parse_share_not_a_number_is_refused(text):
    with pytest.raises(C.CompareError) as e:
        C.parse_share(text, "--min-effect")
    assert str(e.value) == f"--min-effect {text!r}: give a share such as 2% or 0.02"
    assert e.value.__suppress_context__


# ---- Student's t ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("x", [0.05, 0.3, 0.5, 0.7, 0.95])
def test_incomplete_beta_exact_cases(x):
    assert C._ibeta(1.0, 1.0, x) == pytest.approx(x, rel=1e-12)  # uniform
    assert C._ibeta(3.0, 1.0, x) == pytest.approx(x ** 3, rel=1e-12)  # I_x(a, 1) = x^a
    assert C._ibeta(1.0, 4.0, x) == pytest.approx(1 - (1 - x) ** 4, rel=1e-12)  # I_x(1, b) = 1 − (1 − x)^b
    assert C._ibeta(2.0, 2.0, x) == pytest.approx(3 * x * x - 2 * x ** 3, rel=1e-12)
    assert C._ibeta(0.5, 0.5, x) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)), rel=1e-12)  # arcsine
    # I_x(a, b) = 1 − I_{1−x}(b, a), with the continued fraction on both sides of its switch
    assert C._ibeta(7.0, 2.5, x) == pytest.approx(1 - C._ibeta(2.5, 7.0, 1 - x), rel=1e-11, abs=1e-15)


def test_incomplete_beta_on_both_sides_of_its_switch_point():
    # the switch is at x = (a + 1) ÷ (a + b + 2): for a 3, b 1, 4/6; I_x(3, 1) = x³ either side of it
    for x in (0.6, 0.66, 2 / 3, 0.67, 0.8):
        assert C._ibeta(3.0, 1.0, x) == pytest.approx(x ** 3, rel=1e-13)
    # I_x(5, 5) = Σ_{j=5}^{9} C(9, j) x^j (1 − x)^(9 − j): a polynomial, exact
    for x in (0.2, 0.5, 0.55, 0.8):
        exact = sum(math.comb(9, j) * x ** j * (1 - x) ** (9 - j) for j in range(5, 10))
        assert C._ibeta(5.0, 5.0, x) == pytest.approx(exact, rel=1e-12)


def test_incomplete_beta_small_values_keep_their_precision():
    # I_x(1, 4) = 1 − (1 − x)⁴ = 4x − 6x² + 4x³ − x⁴: at x 10⁻⁹ ≈ 4 × 10⁻⁹, summed on its own side (not 1 − ≈1)
    x = 1e-9
    assert C._ibeta(1.0, 4.0, x) == pytest.approx(4 * x - 6 * x ** 2 + 4 * x ** 3 - x ** 4, rel=1e-13)
    # and its mirror: I_{1−x}(4, 1) = (1 − x)⁴ near 1, 1 − I_x(1, 4)
    assert C._ibeta(3.0, 1.0, 1e-5) == pytest.approx(1e-15, rel=1e-13)


def test_incomplete_beta_at_and_past_its_ends():
    assert C._ibeta(2.0, 3.0, 0.0) == 0.0 and C._ibeta(2.0, 3.0, -0.5) == 0.0
    assert C._ibeta(2.0, 3.0, 1.0) == 1.0 and C._ibeta(2.0, 3.0, 1.5) == 1.0
    assert C._ibeta(2.0, 3.0, 1e-300) == pytest.approx(0.0, abs=1e-300)  # 6 x² − 8 x³ + 3 x⁴: ≈ 0


def test_betacf_is_the_fraction_of_the_uniform_and_of_x_cubed():
    # I_x(a, b) = x^a (1 − x)^b ÷ (a B(a, b)) × cf: for a = b = 1, B = 1, so cf = 1 ÷ (1 − x)
    for x in (0.1, 0.4):
        assert C._betacf(1.0, 1.0, x) == pytest.approx(1 / (1 - x), rel=1e-13)
    # a 3, b 1: a B = 3 × 1/3 = 1, I = x³ → cf = x³ ÷ (x³ (1 − x)) = 1 ÷ (1 − x)
    assert C._betacf(3.0, 1.0, 0.5) == pytest.approx(2.0, rel=1e-13)
    # a 5, b 5 at 0.3: the polynomial above ÷ the prefactor x⁵ (1 − x)⁵ ÷ (5 B(5, 5)), B(5, 5) = 4! 4! ÷ 9!
    x = 0.3
    exact = sum(math.comb(9, j) * x ** j * (1 - x) ** (9 - j) for j in range(5, 10))
    pre = x ** 5 * (1 - x) ** 5 / (5 * math.factorial(4) ** 2 / math.factorial(9))
    assert C._betacf(5.0, 5.0, x) == pytest.approx(exact / pre, rel=1e-12)


def test_betacf_through_a_denominator_of_exactly_zero():
    # Lentz's guard: a partial denominator of exactly 0 is taken as 10⁻³⁰⁰ and the fraction still converges.
    # a 1, b 3 at ½: the first, 1 − (1 + 3) ½ ÷ 2 = 0; cf = I a B ÷ (x^a (1 − x)^b) = (7/8)(1/3) ÷ (1/16) = 14/3
    assert C._betacf(1.0, 3.0, 0.5) == pytest.approx(14 / 3, rel=1e-13)
    # a 1, b 4 at ½: a later d is 0; cf = (15/16)(1/4) ÷ (1/32) = 7.5
    assert C._betacf(1.0, 4.0, 0.5) == pytest.approx(7.5, rel=1e-13)
    # a 5, b 8 at ¾: a later c is 0; I = P(Binomial(12, ¾) ≥ 5), a B(5, 8) = 5 · 4! 7! ÷ 12!
    x = 0.75
    i = sum(math.comb(12, j) * x ** j * (1 - x) ** (12 - j) for j in range(5, 13))
    ab = 5 * math.factorial(4) * math.factorial(7) / math.factorial(12)
    assert C._betacf(5.0, 8.0, x) == pytest.approx(i * ab / (x ** 5 * (1 - x) ** 8), rel=1e-12)


@pytest.mark.parametrize("df", [1, 2, 3, 4])
@pytest.mark.parametrize("t", [0.1, 0.5, 1.0, 2.0, 4.3, 12.7, 60.0])
def test_t_sf2_against_the_closed_forms(df, t):
    assert C.t_sf2(t, df) == pytest.approx(sf2_closed(t, df), rel=1e-11, abs=1e-15)


@pytest.mark.parametrize("df", [5, 7.5, 10, 29.3, 120])
@pytest.mark.parametrize("t", [0.3, 1.0, 2.0, 3.5])
def test_t_sf2_against_the_integrated_density(df, t):
    assert C.t_sf2(t, df) == pytest.approx(sf2_numeric(t, df), rel=1e-9)


def test_t_sf2_at_zero_and_towards_the_normal():
    assert C.t_sf2(0.0, 5) == 1.0
    assert C.t_sf2(1.0, 1) == pytest.approx(0.5, rel=1e-13)  # Cauchy: atan 1 = π/4
    # df 10 000 is all but the normal: P(|Z| > 1.96) = erfc(1.96 ÷ √2) = 0.04999579
    for df in (10_000, 1e6):
        for z in (0.5, 1.0, 1.96, 3.0):
            assert C.t_sf2(z, df) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=5e-3 if df == 10_000 else 1e-4)
    assert C.t_sf2(1.96, 10_000) == pytest.approx(sf2_numeric(1.96, 10_000), rel=1e-8)


# published two-sided t-table values (t_{1 − α/2, df}, 3 decimals)
@pytest.mark.parametrize("alpha,df,table", [
    (0.05, 1, 12.706), (0.05, 2, 4.303), (0.05, 3, 3.182), (0.05, 4, 2.776), (0.05, 5, 2.571), (0.05, 10, 2.228),
    (0.05, 30, 2.042), (0.10, 10, 1.812), (0.01, 10, 3.169), (0.01, 2, 9.925), (0.10, 1, 6.314), (0.20, 5, 1.476),
    (0.40, 10, 0.879), (0.001, 5, 6.869)])
def test_t_quantile_against_the_t_table(alpha, df, table):
    assert C.t_quantile(alpha, df) == pytest.approx(table, abs=6e-4)


@pytest.mark.parametrize("alpha", [0.9, 0.6, 0.5, 0.2, 0.05, LOOK1, 0.05 * 6 / (math.pi ** 2 * 36), 1e-5])
@pytest.mark.parametrize("df", [1, 2, 3, 4, 6.5])
def test_t_quantile_against_exact_and_integrated(alpha, df):
    # df 1: tan(π (1 − α) ÷ 2); df 2: (1 − α) √(2 ÷ (1 − (1 − α)²)); 3 and 4: their closed forms; 6.5: numpy
    assert C.t_quantile(alpha, df) == pytest.approx(q_ref(alpha, df), rel=1e-8)


def test_t_quantile_below_one_and_exactly_one():
    assert C.t_quantile(0.5, 1) == pytest.approx(1.0, rel=1e-12)  # tan(π/4)
    assert C.t_quantile(0.6, 2) == pytest.approx(0.4 * math.sqrt(2 / 0.84), rel=1e-12)  # 0.617
    assert C.t_quantile(0.99, 2) < 0.02


# ---- the interval ---------------------------------------------------------------------------------------------
def test_interval_half_far_and_whether_it_excludes_zero():
    iv = C.Interval(0.05, 0.02, 0.08, 0.95, 3)
    assert iv.half == pytest.approx(0.03) and iv.far == 0.08 and iv.excludes_zero
    iv = C.Interval(-0.03, -0.1, 0.02, 0.95, 3)
    assert iv.half == pytest.approx(0.06) and iv.far == 0.1 and not iv.excludes_zero
    assert C.Interval(-0.05, -0.08, -1e-9, 0.95, 3).excludes_zero  # wholly below 0
    assert C.Interval(0.05, 1e-9, 0.08, 0.95, 3).excludes_zero  # wholly above 0
    assert not C.Interval(0.05, 0.0, 0.08, 0.95, 3).excludes_zero  # touching 0 does not exclude it
    assert not C.Interval(-0.05, -0.08, 0.0, 0.95, 3).excludes_zero
    assert C.Interval(-0.05, -0.08, -0.01, 0.95, 3).far == 0.08
    assert C.Interval(0.0, -0.01, 0.01, 0.95, 3).half == pytest.approx(0.01)


def test_look_alpha_sums_to_alpha():
    assert C.look_alpha(1) == pytest.approx(0.05 * 6 / math.pi ** 2, rel=1e-15)  # 0.0304
    assert C.look_alpha(2) == pytest.approx(0.05 * 6 / (4 * math.pi ** 2), rel=1e-15)
    assert C.look_alpha(3, 0.1) == pytest.approx(0.1 * 6 / (9 * math.pi ** 2), rel=1e-15)
    # Σ_{j ≤ N} 1/j² = π²/6 − 1/N + …: the first 10 000 looks spend 5 % × (1 − 6 ÷ (10 000 π²)) of α
    assert sum(C.look_alpha(j) for j in range(1, 10_001)) == pytest.approx(0.05 * (1 - 6 / (1e4 * math.pi ** 2)),
                                                                              rel=1e-7)
    # the 6th look (round 12) is at 99.92 % (docs/design/compare.md)
    assert f"{1 - C.look_alpha(6):.2%}" == "99.92%"


def test_paired_interval_by_hand_at_two_degrees_of_freedom():
    # d 0.1 0.2 0.3: mean 0.2, SD 0.1, SE 0.1/√3; t(0.05, 2) = 0.95 √(2 ÷ 0.0975) = 4.3027
    t = 0.95 * math.sqrt(2 / 0.0975)
    h = t * 0.1 / math.sqrt(3)
    iv = C.paired([0.1, 0.2, 0.3], 0.05)
    assert iv.rel == pytest.approx(math.expm1(0.2), rel=1e-12)
    assert iv.lo == pytest.approx(math.expm1(0.2 - h), rel=1e-9) and iv.hi == pytest.approx(math.expm1(0.2 + h),
                                                                                           rel=1e-9)
    assert (iv.confidence, iv.rounds) == (0.95, 3)
    # two rounds (df 1, Cauchy): d 0 and 0.1, mean 0.05, SD 0.1/√2, SE 0.05; t(0.1, 1) = tan(0.45 π) = 6.3138
    iv = C.paired([0.0, 0.1], 0.1)
    h = math.tan(0.45 * math.pi) * 0.05
    assert (iv.lo, iv.hi) == (pytest.approx(math.expm1(0.05 - h), rel=1e-9), pytest.approx(math.expm1(0.05 + h),
                                                                                         rel=1e-9))
    assert (iv.confidence, iv.rounds) == (pytest.approx(0.9), 2)


def test_paired_needs_two_rounds():
    with pytest.raises(C.CompareError, match="^an interval needs two rounds at least$"):
        C.paired([0.1], 0.05)
    with pytest.raises(C.CompareError):
        C.paired([], 0.05)


def test_welch_equal_sizes_and_variances_is_two_degrees_of_freedom():
    # logs A 0, 0.2 and B 0.3, 0.5: variances 0.02, ÷ 2 → 0.01 each; d 0.3; SE √0.02; df (0.02)² ÷ (2 × 0.0001) = 2
    iv = C.welch([1.0, math.exp(0.2)], [math.exp(0.3), math.exp(0.5)])
    h = (0.95 * math.sqrt(2 / 0.0975)) * math.sqrt(0.02)
    assert iv.rel == pytest.approx(math.expm1(0.3), rel=1e-12)
    assert (iv.lo, iv.hi) == (pytest.approx(math.expm1(0.3 - h), rel=1e-9), pytest.approx(math.expm1(0.3 + h),
                                                                                        rel=1e-9))
    assert (iv.confidence, iv.rounds) == (0.95, 2)


def test_welch_satterthwaite_degrees_of_freedom_by_hand():
    # A's logs 0, 0.2 (va 0.02 ÷ 2 = 0.01); B's 0.1, 0.1 + s, 0.1 + 2s with s² = 0.06 (vb 0.06 ÷ 3 = 0.02):
    # df = 0.03² ÷ (0.01² ÷ 1 + 0.02² ÷ 2) = 0.0009 ÷ 0.0003 = 3; t(0.05, 3) = 3.182 (table)
    s = math.sqrt(0.06)
    a, b = [1.0, math.exp(0.2)], [math.exp(0.1), math.exp(0.1 + s), math.exp(0.1 + 2 * s)]
    d, se = 0.1 + s - 0.1, math.sqrt(0.03)
    for alpha in (0.05, 0.1):
        iv = C.welch(a, b, alpha)
        h = q_ref(alpha, 3) * se
        assert iv.rel == pytest.approx(math.expm1(d), rel=1e-12)
        assert iv.lo == pytest.approx(math.expm1(d - h), rel=1e-9)
        assert iv.hi == pytest.approx(math.expm1(d + h), rel=1e-9)
        assert (iv.confidence, iv.rounds) == (pytest.approx(1 - alpha), 2)
    assert q_ref(0.05, 3) == pytest.approx(3.182, abs=5e-4)
    # the same with the sides swapped: B ÷ A inverted, the same half-width in logs
    iv = C.welch(b, a)
    h = q_ref(0.05, 3) * se
    assert (iv.lo, iv.hi) == (pytest.approx(math.expm1(-d - h), rel=1e-9), pytest.approx(math.expm1(-d + h), rel=1e-9))


def test_welch_unequal_variances_give_fractional_degrees_of_freedom():
    # A's logs 0, 0.2 (va 0.01); B's 0, √0.12 (vb 0.12 ÷ 2 ÷ 2 = 0.03): df = 0.04² ÷ (0.01² + 0.03²) = 1.6, SE 0.2
    # (the pooled n − 2 would be 2); t(0.05, 1.6) from the integrated density
    b1 = math.sqrt(0.12)
    iv = C.welch([1.0, math.exp(0.2)], [1.0, math.exp(b1)])
    d, h = b1 / 2 - 0.1, q_ref(0.05, 1.6) * 0.2
    assert iv.lo == pytest.approx(math.expm1(d - h), rel=1e-8) and iv.hi == pytest.approx(math.expm1(d + h), rel=1e-8)


def test_welch_with_a_standard_error_of_exactly_one():
    # A's logs 0, 2 (va 2 ÷ 2 = 1), B without noise: SE 1 (not a point), df A's n − 1 = 1 (Cauchy: t = tan(0.475 π))
    iv = C.welch([1.0, math.exp(2.0)], [1.0, 1.0])
    h = math.tan(0.475 * math.pi)
    assert iv.lo == pytest.approx(math.expm1(-1 - h), rel=1e-9) and iv.hi == pytest.approx(math.expm1(-1 + h),
                                                                                          rel=1e-9)


def test_welch_a_side_without_noise_leaves_the_others_degrees_of_freedom():
    # Welch–Satterthwaite's df = (va + vb)² ÷ (va² ÷ (n_a − 1) + vb² ÷ (n_b − 1)) is n_b − 1 at va = 0 (its limit as
    # va → 0, so the interval is continuous in A's noise). A 1, 1, 1; B's logs 0.1, 0.3 (vb 0.02 ÷ 2 = 0.01, SE
    # 0.1): df 1, t(0.05, 1) = 12.706, not the pooled 3's 3.182 (before round 22: −11 … +68 %, now −66 … +335 %)
    b = [math.exp(0.1), math.exp(0.3)]
    iv = C.welch([1.0, 1.0, 1.0], b)
    h = math.tan(0.475 * math.pi) * 0.1
    assert iv.lo == pytest.approx(math.expm1(0.2 - h), rel=1e-9) and iv.hi == pytest.approx(math.expm1(0.2 + h),
                                                                                           rel=1e-9)
    assert iv.hi == pytest.approx(C.welch([1.0, 1.0, 1.0 + 1e-9], b).hi, rel=1e-3)  # continuous in A's noise
    assert iv.rounds == 2
    iv = C.welch(b, [1.0, 1.0, 1.0, 1.0])  # B without noise: A's n − 1 = 1
    assert iv.lo == pytest.approx(math.expm1(-0.2 - h), rel=1e-9) and iv.hi == pytest.approx(math.expm1(-0.2 + h),
                                                                                            rel=1e-9)
    # three runs of B's noise: df 2, t(0.05, 2) = 4.303 (df 2's closed form: 0.95 ÷ √(2 · 0.975 · 0.025) = 4.3027)
    b3 = [math.exp(0.1), math.exp(0.2), math.exp(0.3)]  # var 0.01, ÷ 3
    iv = C.welch([1.0, 1.0], b3)
    h3 = 0.95 / math.sqrt(2 * 0.975 * 0.025) * math.sqrt(0.01 / 3)
    assert iv.lo == pytest.approx(math.expm1(0.2 - h3), rel=1e-9)


def test_welch_without_any_noise_is_a_point():
    iv = C.welch([2.0, 2.0], [3.0, 3.0, 3.0], 0.1)
    assert iv.rel == pytest.approx(0.5, rel=1e-12) and iv.lo == iv.rel and iv.hi == iv.rel
    assert (iv.confidence, iv.rounds) == (pytest.approx(0.9), 2)


def test_welch_needs_two_runs_a_side():
    for a, b in (([1.0], [1.0, 2.0]), ([1.0, 2.0], [1.0]), ([], [])):
        with pytest.raises(C.CompareError) as e:
            C.welch(a, b)
        assert str(e.value) == "an interval needs two runs a side at least (bench --reps 5)"


def test_detectable_by_hand():
    # 3 rounds, df 2: t(0.05, 2) 4.3027 + t(0.4, 2) = 0.6 √(2 ÷ 0.64) = 1.0607; × SD 0.1 ÷ √3
    want = math.expm1((0.95 * math.sqrt(2 / 0.0975) + 0.6 * math.sqrt(2 / 0.64)) * 0.1 / math.sqrt(3))
    assert C.detectable(0.1, 3) == pytest.approx(want, rel=1e-9)
    # 2 rounds, df 1: tan(0.475 π) 12.706 + tan(0.3 π) 1.3764, × 0.02 ÷ √2
    want = math.expm1((math.tan(0.475 * math.pi) + math.tan(0.3 * math.pi)) * 0.02 / math.sqrt(2))
    assert C.detectable(0.02, 2) == pytest.approx(want, rel=1e-9)
    # α 0.1 and 90 % power at df 2: t(0.1, 2) = 0.9 √(2 ÷ 0.19), t(0.2, 2) = 0.8 √(2 ÷ 0.36)
    want = math.expm1((0.9 * math.sqrt(2 / 0.19) + 0.8 * math.sqrt(2 / 0.36)) * 0.05 / math.sqrt(3))
    assert C.detectable(0.05, 3, 0.1, 0.9) == pytest.approx(want, rel=1e-9)
    # 11 rounds (df 10), table: 2.228 + 0.879
    assert C.detectable(0.1, 11) == pytest.approx(math.expm1((2.228 + 0.879) * 0.1 / math.sqrt(11)), rel=3e-4)
    assert C.detectable(0.0, 5) == 0.0


def test_detectable_below_two_rounds_is_infinite():
    assert C.detectable(0.1, 1) == math.inf and C.detectable(0.1, 0) == math.inf
    assert math.isfinite(C.detectable(0.1, 2))


def test_the_looks_schedule():
    assert C.Sequential().looks(30) == [3, 4, 5, 7, 9, 12, 15, 19, 24, 30]  # docs/design/compare.md
    assert C.Sequential().looks(29) == [3, 4, 5, 7, 9, 12, 15, 19, 24]
    assert C.Sequential().looks(2) == [] and C.Sequential().looks(3) == [3]
    assert C.Sequential(min_rounds=1).looks(5) == [2, 3, 4, 5]  # never before two rounds
    assert C.Sequential(min_rounds=2).looks(5) == [2, 3, 4, 5]
    assert C.Sequential(min_rounds=10).looks(30) == [10, 13, 17, 22, 28]  # ⌈12.5⌉, ⌈16.25⌉, ⌈21.25⌉, ⌈27.5⌉


@pytest.mark.parametrize("rounds,look", [(1, 1), (2, 1), (3, 1), (4, 2), (5, 3), (6, 4), (7, 4), (8, 5), (9, 5),
                                         (10, 6), (12, 6), (13, 7), (30, 10), (31, 11)])
def test_look_at(rounds, look):
    assert C.look_at(rounds) == look


def test_look_at_other_minimum():
    # looks 5, 7, 9, 12
    assert [C.look_at(r, 5) for r in (4, 5, 6, 7, 8, 12, 13)] == [1, 1, 2, 2, 3, 4, 5]


def test_order_alternates():
    assert [C.order(i) for i in range(5)] == ["ABBA", "BAAB", "ABBA", "BAAB", "ABBA"]


# ---- the sequence of rounds -----------------------------------------------------------------------------------
def test_add_keeps_the_figures_and_refuses_a_zero():
    s = C.Sequential()
    s.add((1.0, 3.0), [2.0, 6.0])
    s.add([2.0, 2.0], (1.0, 1.0))
    assert s.rounds == [([1.0, 3.0], [2.0, 6.0]), ([2.0, 2.0], [1.0, 1.0])]
    assert s.ds == [pytest.approx(math.log(2)), pytest.approx(-math.log(2))]  # ln(4 ÷ 2), ln(1 ÷ 2)
    s.add([1e-12, 1.0], [1.0, 1e-12])  # small but above 0: kept
    assert len(s.rounds) == 3
    for a, b in (([0.0, 1.0], [1.0, 1.0]), ([1.0, 1.0], [1.0, 0.0]), ([1.0, -1.0], [1.0, 1.0]),
                 ([1.0, 1.0], [-2.0, 5.0])):
        with pytest.raises(C.CompareError) as e:
            s.add(a, b)
        assert str(e.value) == ("a run's figure is 0: no ratio to compare (goodput 0: no request met the SLO; "
                                "compare tok/s, or loosen --slo)")
    assert len(s.rounds) == 3


def test_ds_are_the_log_ratio_of_the_means():
    s = C.Sequential()
    s.add([90.0, 110.0], [99.0, 121.0])  # means 100, 110
    assert s.ds == [pytest.approx(math.log(1.1), rel=1e-14)]
    assert C.Sequential().ds == []


def test_is_look_at_the_schedules_rounds():
    s = C.Sequential()
    seen = []
    for _ in range(13):
        s.add([1.0, 1.0], [1.1, 1.1])
        seen.append(s.is_look())
    assert [i + 1 for i, x in enumerate(seen) if x] == [3, 4, 5, 7, 9, 12]


def test_interval_none_before_the_minimum_rounds():
    assert seq_of([0.1, 0.2]).interval() is None
    assert seq_of([0.1]).interval() is None
    assert seq_of([0.1], min_rounds=1).interval() is None  # two rounds at least, whatever min_rounds says
    iv = seq_of([0.1, 0.2], min_rounds=1).interval()  # the first look at 2 rounds: df 1 at 1 − 0.0304
    h = q_ref(LOOK1, 1) * (0.1 / math.sqrt(2)) / math.sqrt(2)
    assert iv.lo == pytest.approx(math.expm1(0.15 - h), rel=1e-9) and iv.confidence == pytest.approx(1 - LOOK1)


def test_interval_at_the_first_look_by_hand():
    # d 0.10 0.11 0.12: mean 0.11, SD 0.01; the first look at 1 − 0.0304; df 2's t in closed form
    ds = [0.10, 0.11, 0.12]
    iv = seq_of(ds).interval()
    t = (1 - LOOK1) * math.sqrt(2 / (1 - (1 - LOOK1) ** 2))  # 5.60
    h = t * 0.01 / math.sqrt(3)
    assert iv.confidence == pytest.approx(1 - LOOK1, rel=1e-15) and iv.rounds == 3
    assert iv.rel == pytest.approx(math.expm1(0.11), rel=1e-9)
    assert iv.lo == pytest.approx(math.expm1(0.11 - h), rel=1e-7) and iv.hi == pytest.approx(math.expm1(0.11 + h),
                                                                                            rel=1e-7)
    # a smaller α changes the level: 1 − 0.01 × 6 ÷ π²
    iv = seq_of(ds, alpha=0.01).interval()
    assert iv.confidence == pytest.approx(1 - 0.06 / math.pi ** 2, rel=1e-15)


@pytest.mark.parametrize("rounds,look", [(3, 1), (4, 2), (5, 3), (6, 4), (7, 4), (8, 5), (9, 5), (10, 6)])
def test_interval_takes_this_look_or_the_next_ones_level(rounds, look):
    ds = [0.05 + 0.01 * (i % 3) for i in range(rounds)]
    iv = seq_of(ds).interval()
    alpha = 0.05 * 6 / (math.pi ** 2 * look ** 2)
    assert iv.confidence == pytest.approx(1 - alpha, rel=1e-15)
    h = q_ref(alpha, rounds - 1) * sd_of(ds) / math.sqrt(rounds)
    m = statistics.fmean(ds)
    assert iv.lo == pytest.approx(math.expm1(m - h), rel=1e-7) and iv.hi == pytest.approx(math.expm1(m + h), rel=1e-7)


def test_resolved_a_difference_only_at_a_look_or_the_last_round():
    s = seq_of([0.10, 0.11, 0.12])
    assert s.resolved() == "difference" and s.resolved(last=True) == "difference"
    s = seq_of([0.10, 0.11, 0.12, 0.11, 0.10, 0.12])  # round 6: between the looks at 5 and 7
    assert s.interval().excludes_zero
    assert s.resolved() is None and s.resolved(last=True) == "difference"
    assert seq_of([0.1, 0.1]).resolved(last=True) is None  # no interval yet


def test_resolved_none_within_the_precision():
    s = seq_of([0.001, -0.001, 0.0005])
    iv = s.interval()
    assert not iv.excludes_zero
    assert s.resolved() is None  # no precision asked: go on
    s.precision = iv.far
    assert s.resolved() == "none"  # the interval within ± precision, its far end on the bound
    s.precision = iv.far * (1 - 1e-9)
    assert s.resolved() is None and s.resolved(last=True) is None
    s = seq_of([0.001, -0.001, 0.0005, 0.0, 0.001, -0.0005], precision=0.5)  # round 6: not a look
    assert s.resolved() is None and s.resolved(last=True) == "none"


def test_resolved_a_difference_comes_before_the_precision():
    s = seq_of([0.10, 0.11, 0.12], precision=0.9)  # far 0.12 + … ≤ 0.9, but it excludes 0
    assert s.resolved() == "difference"


# ---- what the budget can tell ---------------------------------------------------------------------------------
def test_plan_line_by_hand():
    ds = [0.02, -0.03, 0.04]
    s = seq_of(ds)
    sd = sd_of(ds)  # 0.0361
    # 60 s a round, 90 s left: 3 + ⌊90 ÷ 60⌋ = 4 rounds, the 2nd look (round 4), df 3, α 0.05 × 6 ÷ (4 π²) =
    # 0.0076: (t 6.438 + t(0.4, 3) 0.978, df 3's closed form) × 0.0361 ÷ √4 → 14.3 %; now, df 2 at the 1st look's
    # α 0.05 × 6 ÷ π² = 0.0304 (the level the outcome's detectable difference is at) → 14.9 %
    a2 = 0.05 * 6 / (4 * math.pi ** 2)
    at = math.expm1((q_ref(a2, 3) + q_ref(0.4, 3)) * sd / 2)
    now = math.expm1((q_ref(0.3 / math.pi ** 2, 2) + q_ref(0.4, 2)) * sd / math.sqrt(3))
    assert C.plan_line(s, 60.4, 90.0) == (
        f"noise of the first 3 rounds: B ÷ A moves {math.expm1(sd):.1%} a round (SD); at ≈ 60 s a round the budget "
        f"holds ≈ 4 rounds: the smallest difference they detect at 80% power is ±{at:.1%} (now, at 3 rounds: "
        f"±{now:.1%})")
    assert f"{math.expm1(sd):.1%}" == "3.7%" and f"{at:.1%}" == "14.3%" and f"{now:.1%}" == "14.9%"


def test_plan_line_rounds_the_budget_holds():
    s = seq_of([0.02, -0.03, 0.04])
    # 10 s a round, 125 s left: 3 + 12 = 15 rounds (the 7th look)
    sd = sd_of([0.02, -0.03, 0.04])
    at = math.expm1((q_ref(0.05 * 6 / (49 * math.pi ** 2), 14) + q_ref(0.4, 14)) * sd / math.sqrt(15))
    line = C.plan_line(s, 10.0, 125.0)
    assert "holds ≈ 15 rounds" in line and f"is ±{at:.1%} (now" in line
    assert "holds ≈ 3 rounds" in C.plan_line(s, 10.0, 9.9)  # not one more round
    assert "holds ≈ 4 rounds" in C.plan_line(s, 10.0, 10.0)
    assert "holds ≈ 3 rounds" in C.plan_line(s, 10.0, -50.0)  # the budget spent: the rounds so far
    assert "at ≈ 0 s a round the budget holds ≈ 3 rounds" in C.plan_line(s, 0.0, 100.0)  # no pace: no more
    # the rounds that fit whole: 0.1 s is 0.1000000000000000055 as a float, ten of them more than 1.0 s (⌊1.0 ÷ 0.1⌋
    # is 9, where 1.0 ÷ 0.1 rounds to 10)
    assert "holds ≈ 12 rounds" in C.plan_line(s, 0.1, 1.0)


def test_plan_line_of_one_round_has_no_noise_yet():
    s = seq_of([0.05])
    assert C.plan_line(s, 60.0, 120.0) == (
        "noise of the first 1 rounds: B ÷ A moves 0.0% a round (SD); at ≈ 60 s a round the budget holds ≈ 3 "
        "rounds: the smallest difference they detect at 80% power is ±0.0% (now, at 1 rounds: ±inf%)")


def test_plan_line_of_two_rounds_and_a_pace_under_a_second():
    ds = [math.log(1.1), math.log(1.2)]
    sd = abs(ds[1] - ds[0]) / math.sqrt(2)  # 0.0615
    s = C.Sequential()
    s.add([1.0, 1.0], [1.1, 1.1])
    s.add([1.0, 1.0], [1.2, 1.2])
    # 0.5 s a round, 2 s left: 2 + 4 = 6 rounds, the 4th look (α 0.05 × 6 ÷ (16 π²)), df 5; now df 1 at the 1st
    # look's α 0.0304: (1 ÷ tan(π × 0.0152) + 1.376) × 0.0615 ÷ √2 → 163.9 %
    at = math.expm1((q_ref(0.3 / (16 * math.pi ** 2), 5) + q_ref(0.4, 5)) * sd / math.sqrt(6))
    now = math.expm1((1 / math.tan(0.15 / math.pi) + math.tan(0.3 * math.pi)) * sd / math.sqrt(2))
    assert C.plan_line(s, 0.5, 2.0) == (
        f"noise of the first 2 rounds: B ÷ A moves {math.expm1(sd):.1%} a round (SD); at ≈ 0 s a round the budget "
        f"holds ≈ 6 rounds: the smallest difference they detect at 80% power is ±{at:.1%} (now, at 2 rounds: "
        f"±{now:.1%})")
    assert f"{math.expm1(sd):.1%}" == "6.3%" and f"{now:.1%}" == "163.9%"


def test_plan_line_uses_the_sequences_alpha_and_minimum():
    ds = [0.02, -0.03, 0.04]
    sd = sd_of(ds)
    s = seq_of(ds, alpha=0.1, min_rounds=2)
    # looks 2, 3, 4: 4 rounds is the 3rd look, α 0.1 × 6 ÷ (9 π²); now, 3 rounds, the 2nd: α 0.1 × 6 ÷ (4 π²)
    at = math.expm1((q_ref(0.6 / (9 * math.pi ** 2), 3) + q_ref(0.4, 3)) * sd / 2)
    now = math.expm1((q_ref(0.6 / (4 * math.pi ** 2), 2) + q_ref(0.4, 2)) * sd / math.sqrt(3))
    line = C.plan_line(s, 30.0, 30.0)
    assert f"is ±{at:.1%} (now, at 3 rounds: ±{now:.1%})" in line


# ---- the verdict, in words ------------------------------------------------------------------------------------
def test_verdict_a_difference_slower_in_tok_s():
    iv = C.Interval(-0.07, -0.09, -0.05, 0.95, 3)
    assert C.verdict(iv, TOKS, (100.0, 93.0)) == (
        "B is 7.0% ± 2.0% slower than A in tok/s (A 100, B 93 tok/s; interval -9.0% … -5.0% of A's tok/s, "
        "95% confidence; smallest detectable difference ±2.0%)")


def test_verdict_a_difference_faster_with_names_and_a_look_level():
    iv = C.Interval(0.123, 0.0612, 0.1876, 1 - LOOK1, 3)
    assert C.verdict(iv, TOKS, (1234.5678, 1386.4), names=("old", "new"), sd=0.01, precision=0.5) == (
        "new is 12.3% ± 6.3% faster than old in tok/s (old 1235, new 1386 tok/s; interval +6.1% … +18.8% of old's "
        "tok/s, 96.96% at this look, 95 % over every look; smallest detectable difference ±6.3%)")


def test_verdict_latency_direction():
    up = C.Interval(0.07, 0.05, 0.09, 0.95, 3)
    down = C.Interval(-0.07, -0.09, -0.05, 0.95, 3)
    assert C.verdict(up, TPOT, (10.0, 10.7)).startswith("B is 7.0% ± 2.0% slower than A in TPOT p50 (A 10, B 10.7 ms;")
    assert C.verdict(down, TTFT, (100.0, 93.0)).startswith("B is 7.0% ± 2.0% faster than A in TTFT p99 (")
    assert C.verdict(up, GOOD, (1.0, 1.07)).startswith("B is 7.0% ± 2.0% faster than A in goodput (")


def test_verdict_level_words_on_either_side_of_95():
    at95 = C.Interval(0.07, 0.05, 0.09, 0.95, 3)
    assert "95% confidence;" in C.verdict(at95, TOKS, (1.0, 1.07))
    edge = C.Interval(0.07, 0.05, 0.09, 1 - C.ALPHA + 1e-9, 3)  # on the bound: not above it
    assert "95% confidence;" in C.verdict(edge, TOKS, (1.0, 1.07))
    above = C.Interval(0.07, 0.05, 0.09, 0.95 + 2e-9, 3)
    assert "95.00% at this look, 95 % over every look;" in C.verdict(above, TOKS, (1.0, 1.07))
    below = C.Interval(0.07, 0.05, 0.09, 0.9, 3)
    assert "90% confidence;" in C.verdict(below, TOKS, (1.0, 1.07))
    assert "99.00% at this look" in C.verdict(C.Interval(0.07, 0.05, 0.09, 0.99, 3), TOKS, (1.0, 1.07))


def test_verdict_no_difference_names_the_far_end_and_what_it_can_detect():
    iv = C.Interval(0.01, -0.02, 0.04, 0.95, 5)
    # 5 rounds, df 4, at the interval's own level: (t(0.05, 4) 2.776 + t(0.4, 4) 0.941) × 0.05 ÷ √5 → 8.7 %
    det = math.expm1((q_ref(0.05, 4) + q_ref(0.4, 4)) * 0.05 / math.sqrt(5))
    assert f"{det:.1%}" == "8.7%"
    assert C.verdict(iv, TOKS, (100.0, 101.0), sd=0.05) == (
        "no difference above 4.0% in tok/s, this machine's noise (A 100, B 101 tok/s; B vs A +1.0%, interval "
        "-2.0% … +4.0% of A's tok/s, 95% confidence; the interval's half-width ±3.0%; a difference of ±8.7% is "
        "found 80% of the time)")
    assert C.verdict(iv, TOKS, (100.0, 101.0)) == (
        "no difference above 4.0% in tok/s, this machine's noise (A 100, B 101 tok/s; B vs A +1.0%, interval "
        "-2.0% … +4.0% of A's tok/s, 95% confidence; the interval's half-width ±3.0%)")


def test_verdict_no_difference_at_a_look_level_detects_at_that_level():
    iv = C.Interval(-0.01, -0.05, 0.03, 1 - LOOK1, 3)
    det = math.expm1((q_ref(LOOK1, 2) + q_ref(0.4, 2)) * 0.02 / math.sqrt(3))
    text = C.verdict(iv, TPOT, (10.0, 9.9), names=("x", "y"), sd=0.02)
    assert text == (f"no difference above 5.0% in TPOT p50, this machine's noise (x 10, y 9.9 ms; y vs x -1.0%, "
                    f"interval -5.0% … +3.0% of x's TPOT p50, 96.96% at this look, 95 % over every look; the "
                    f"interval's half-width ±4.0%; a difference of ±{det:.1%} is found 80% of the time)")


def test_verdict_precision_bound_on_both_sides():
    iv = C.Interval(0.01, -0.02, 0.04, 0.95, 5)
    assert C.verdict(iv, TOKS, (1.0, 1.0), precision=0.05).startswith("no difference above 5.0% in tok/s")
    assert C.verdict(iv, TOKS, (1.0, 1.0), precision=0.0401).startswith("no difference above 4.0% in")
    assert C.verdict(iv, TOKS, (1.0, 1.0), precision=0.04).startswith("no difference above 4.0% in")
    assert C.verdict(iv, TOKS, (1.0, 1.0), precision=0.0399).startswith("no difference above 4.0% in")
    assert C.verdict(iv, TOKS, (1.0, 1.0), precision=0.03).startswith("no difference above 4.0% in")


# ---- errors ---------------------------------------------------------------------------------------------------
def test_error_line():
    assert C.error_line({"A": 0, "B": 16}, {"A": 64, "B": 64}) == "errors A 0 of 64, B 16 of 64"
    assert C.error_line({}, {}) == "errors A 0 of 0, B 0 of 0"
    assert C.error_line({"B": 2, "C": 9}, {"A": 5}) == "errors A 0 of 5, B 2 of 0"


DOWN = C.Interval(-0.07, -0.09, -0.05, 0.95, 3)  # B's figure 7 % lower
UP = C.Interval(0.07, 0.05, 0.09, 0.95, 3)  # B's figure 7 % higher
FLAT = C.Interval(0.01, -0.02, 0.04, 0.95, 3)


def test_error_caveat_equal_shares_say_nothing():
    assert C.error_caveat(DOWN, TPOT, {"A": 0, "B": 0}, {"A": 64, "B": 64}) == (None, None)
    assert C.error_caveat(DOWN, TPOT, {"A": 1, "B": 2}, {"A": 2, "B": 4}) == (None, None)  # ½ each
    assert C.error_caveat(DOWN, TPOT, {}, {}) == (None, None)
    assert C.error_caveat(None, TPOT, {"A": 3, "B": 3}, {}) == (None, None)  # 3 ÷ max(1, 0) each


def test_error_caveat_no_latency_verdict_for_the_side_that_failed_more():
    said = "B failed 16 of 64 requests (25%), A 0%"
    assert C.error_caveat(DOWN, TPOT, {"A": 0, "B": 16}, {"A": 64, "B": 64}) == (
        "errors", f"no verdict on TPOT p50: {said}; its TPOT p50 is over the requests it answered (a failed request "
                  "costs no wait: B reads 7.0% lower there)")
    # A failed more and A comes out better (B 7 % higher TTFT)
    assert C.error_caveat(UP, TTFT, {"A": 8, "B": 1}, {"A": 32, "B": 32}) == (
        "errors", "no verdict on TTFT p99: A failed 8 of 32 requests (25%), B 3%; its TTFT p99 is over the requests "
                  "it answered (a failed request costs no wait: A reads 7.0% lower there)")


def test_error_caveat_the_side_with_more_errors_coming_out_worse_is_only_said():
    said = "B failed 16 of 64 requests (25%), A 0%"
    assert C.error_caveat(UP, TPOT, {"A": 0, "B": 16}, {"A": 64, "B": 64}) == (None, said)  # B slower anyway
    assert C.error_caveat(FLAT, TPOT, {"A": 0, "B": 16}, {"A": 64, "B": 64}) == (None, said)  # no difference
    assert C.error_caveat(None, TPOT, {"A": 0, "B": 16}, {"A": 64, "B": 64}) == (None, said)  # no interval
    assert C.error_caveat(DOWN, TOKS, {"A": 0, "B": 16}, {"A": 64, "B": 64}) == (None, said)  # B lower tok/s
    assert C.error_caveat(UP, TOKS, {"A": 4, "B": 0}, {"A": 8, "B": 8}) == (None, "A failed 4 of 8 requests (50%), B 0%")


def test_error_caveat_a_throughput_lead_counts_failures_as_served():
    assert C.error_caveat(UP, TOKS, {"A": 0, "B": 16}, {"A": 64, "B": 64}) == (
        None, "B failed 16 of 64 requests (25%), A 0%; its tok/s lead counts the requests it failed as served at no "
              "cost")
    assert C.error_caveat(DOWN, GOOD, {"A": 1, "B": 0}, {"A": 1, "B": 2}) == (
        None, "A failed 1 of 1 requests (100%), B 0%; its goodput lead counts the requests it failed as served at "
              "no cost")


def test_error_caveat_shares_not_counts():
    # A 2 of 4 (50 %) against B 3 of 12 (25 %): A failed the larger share though fewer requests
    assert C.error_caveat(None, TOKS, {"A": 2, "B": 3}, {"A": 4, "B": 12}) == (
        None, "A failed 2 of 4 requests (50%), B 25%")
    # B 1 of 1 (100 %) against A 1 of 2 (50 %)
    assert C.error_caveat(None, TOKS, {"A": 1, "B": 1}, {"A": 2, "B": 1}) == (
        None, "B failed 1 of 1 requests (100%), A 50%")
    # a side missing from the errors failed none: B 1 of 4 against A's 0
    assert C.error_caveat(None, TOKS, {"B": 1}, {"A": 4, "B": 4}) == (None, "B failed 1 of 4 requests (25%), A 0%")
    # no requests counted: max(1, 0) keeps the share finite
    assert C.error_caveat(None, TOKS, {"A": 0, "B": 2}, {}) == (None, "B failed 2 of 0 requests (200%), A 0%")


# ---- what a compare found ---------------------------------------------------------------------------------------
RUNS: list[C.RoundRun] = [
    {"side": "A", "round": 1, "value": 10.0, "seconds": 1.0, "errors": 1, "requests": 8},
    {"side": "B", "round": 1, "value": 11.0, "seconds": 1.0, "errors": 0, "requests": 8},
    {"side": "B", "round": 2, "value": 11.0, "seconds": 1.0, "errors": 3, "requests": 8},
    {"side": "A", "round": 2, "value": 10.0, "seconds": 1.0, "errors": 2, "requests": 6},
    {"side": "A", "round": 2, "value": 10.0},
]


def test_tally_and_the_comparisons_counts():
    assert C._tally(RUNS) == ({"A": 3, "B": 3}, {"A": 14, "B": 16})
    assert C._tally([]) == ({"A": 0, "B": 0}, {"A": 0, "B": 0})
    assert C._tally([{"side": "A", "value": 1.0}]) == ({"A": 0, "B": 0}, {"A": 0, "B": 0})
    c = C.Comparison("s", "difference", None, (1.0, 2.0), RUNS)
    assert c.errors == {"A": 3, "B": 3} and c.requests == {"A": 14, "B": 16}
    c = C.Comparison("s", "welch", None, (1.0, 2.0), [{"side": "A", "value": 1.0}, {"side": "B", "value": 1.0}])
    assert c.errors == {"A": 0, "B": 0} and c.requests == {"A": 0, "B": 0}


@pytest.mark.parametrize("state,ended", [("difference", "decided"), ("none", "decided"), ("errors", "decided"),
                                         ("failed", "a run failed"), ("welch", "runs on disk"),
                                         ("budget", "the budget ended")])
def test_to_dict(state, ended):
    iv = C.Interval(0.1, 0.05, 0.15, 0.97, 3)
    d = C.Comparison("words", state, iv, (1.0, math.nan), RUNS, ["n"], 0.2).to_dict()
    assert d == {"sentence": "words", "state": state,
                 "interval": {"rel": 0.1, "lo": 0.05, "hi": 0.15, "confidence": 0.97, "rounds": 3},
                 "means": [1.0, None], "runs": RUNS, "notes": ["n"], "rounds": 2,
                 "errors": {"A": 3, "B": 3}, "requests": {"A": 14, "B": 16}, "detectable": 0.2, "ended": ended,
                 "answers": None}


def test_to_dict_without_rounds_or_interval_and_with_answers():
    ag = Agreement(4, 3, {2: 5}, {"A": 0, "B": 0}, {"A": 1, "B": 1})
    c = C.Comparison("w", "welch", None, (2.0, 3.0), [{"side": "A", "value": 1.0}], answers=ag)
    d = c.to_dict()
    assert d["interval"] is None and d["rounds"] == 0 and d["means"] == [2.0, 3.0] and d["detectable"] is None
    assert d["answers"] == ag.to_dict() and d["answers"]["first_divergence"] == 5 and d["notes"] == []
    assert C.Comparison("w", "budget", None, (1.0, 1.0), []).to_dict()["rounds"] == 0


def _differ() -> Agreement:
    return Agreement(16, 12, {1: 31, 5: 40, 7: 33, 9: 31}, {"A": 0, "B": 0}, {"A": 2, "B": 2})


def test_with_answers_names_a_winner_whose_answers_differ():
    ag = _differ()
    words = "answers differ in 4 of 16 prompts from token 31 (token ids, greedy; A's first run against B's, median " \
            "token 32)"
    assert ag.words() == words and ag.basis == IDS
    c = C.Comparison("B is faster", "difference", UP, (1.0, 1.07), [], ["n0"])
    out = c.with_answers(ag, TOKS)
    assert out.sentence == f"B is faster; B wins, but its {words}"
    assert out.answers is ag and out.notes == ["n0", ag.where()] and c.notes == ["n0"]
    assert (out.state, out.interval, out.means) == (c.state, c.interval, c.means)
    # the lower latency wins: B 7 % higher TPOT, A wins; tok/s 7 % lower, A wins; welch too
    assert c.with_answers(ag, TPOT).sentence == f"B is faster; A wins, but its {words}"
    assert C.Comparison("s", "welch", DOWN, (1.0, 1.0), []).with_answers(ag, TOKS).sentence == \
        f"s; A wins, but its {words}"
    assert C.Comparison("s", "welch", DOWN, (1.0, 1.0), []).with_answers(ag, TTFT).sentence == \
        f"s; B wins, but its {words}"


def test_with_answers_no_winner_without_a_decided_difference():
    ag = _differ()
    for state, iv in (("errors", UP), ("none", UP), ("budget", UP), ("difference", FLAT), ("difference", None)):
        out = C.Comparison("s", state, iv, (1.0, 1.0), []).with_answers(ag, TOKS)
        assert out.sentence == f"s; {ag.words()}"


def test_with_answers_alike_or_not_compared():
    same = Agreement(16, 16, {}, {"A": 0, "B": 0}, {"A": 1, "B": 1})
    out = C.Comparison("s", "difference", UP, (1.0, 1.0), [], ["n"]).with_answers(same, TOKS)
    assert out.sentence == "s; answers identical in 16 of 16 prompts (token ids, greedy)" and out.notes == ["n"]
    out = C.Comparison("s", "difference", UP, (1.0, 1.0), [], ["n"]).with_answers(None, TOKS)
    assert out.sentence == ("s; answers not compared (the records carry no answers: records written before, or a run "
                            "mixing kinds)") and out.notes == ["n"] and out.answers is None


# ---- the outcome --------------------------------------------------------------------------------------------------
def _seq(bs, runs=None, **kw) -> C.Sequential:
    s = C.Sequential(**kw)
    for b in bs:
        s.add([99.0, 101.0], [b, b])
    if runs is not None:
        s.runs = runs
    return s


def test_outcome_a_decided_difference_by_hand():
    s = _seq([110.0, 111.0, 112.0])
    out = C._outcome(s, TOKS, "difference", s.runs)
    ds = [math.log(1.10), math.log(1.11), math.log(1.12)]
    sd = sd_of(ds)
    h = q_ref(LOOK1, 2) * sd / math.sqrt(3)
    m = statistics.fmean(ds)
    assert out.state == "difference" and out.means == (100.0, 111.0)
    assert out.interval.lo == pytest.approx(math.expm1(m - h), rel=1e-8)
    assert out.interval.confidence == pytest.approx(1 - LOOK1)
    assert out.detectable == pytest.approx(math.expm1((q_ref(LOOK1, 2) + q_ref(0.4, 2)) * sd / math.sqrt(3)),
                                           rel=1e-8)
    # CV: A 99 101 × 3, SD √(6 ÷ 5) = 1.095 of 100; B 110 110 111 111 112 112, SD √(4 ÷ 5) = 0.894 of 111
    assert out.notes == ["run-to-run CV: A 1.1%, B 0.8% of its mean"]
    assert out.sentence.startswith(f"B is {math.expm1(m):.1%} ± ") and "faster than A in tok/s (A 100, B 111 tok/s;" \
        in out.sentence
    assert out.sentence.endswith(f"smallest detectable difference ±{(math.expm1(m + h) - math.expm1(m - h)) / 2:.1%}"
                                 ") — decided after 3 rounds")
    assert out.runs is s.runs and out.answers is None


def test_outcome_the_budget_ended_says_what_it_could_detect():
    s = _seq([105.0, 110.0, 115.0], precision=0.01)
    out = C._outcome(s, TOKS, "budget", [])
    ds = [math.log(1.05), math.log(1.10), math.log(1.15)]
    sd = sd_of(ds)
    det = math.expm1((q_ref(LOOK1, 2) + q_ref(0.4, 2)) * sd / math.sqrt(3))
    assert out.state == "budget" and not out.interval.excludes_zero
    assert out.sentence.startswith(f"no difference above {out.interval.far:.1%} in tok/s, this machine's noise (A "
                                   "100, B 110 tok/s;")
    assert out.sentence.endswith(f"; a difference of ±{det:.1%} is found 80% of the time) — the budget ended after "
                                 "3 rounds, undecided")
    assert out.notes == ["run-to-run CV: A 1.1%, B 4.1% of its mean",
                         "the budget ended before the interval resolved (a longer --budget narrows it)"]
    assert out.detectable == pytest.approx(det, rel=1e-8)


def test_outcome_none_within_the_precision_is_decided():
    s = _seq([100.0, 100.2, 99.9], precision=0.05)
    out = C._outcome(s, TOKS, "none", [])
    assert out.sentence.startswith("no difference above 5.0% in tok/s")
    assert out.sentence.endswith(" — decided after 3 rounds") and len(out.notes) == 1


def test_outcome_errors_take_the_latency_verdict_away():
    runs: list[C.RoundRun] = [{"side": "A", "value": 1.0, "round": 1, "errors": 0, "requests": 30},
                              {"side": "B", "value": 1.0, "round": 1, "errors": 6, "requests": 30}]
    s = _seq([95.0, 94.0, 93.0])  # B's TPOT 6 % lower, but it failed 20 %
    out = C._outcome(s, TPOT, "difference", runs)
    assert out.state == "errors"
    assert out.sentence == ("no verdict on TPOT p50: B failed 6 of 30 requests (20%), A 0%; its TPOT p50 is over the "
                            f"requests it answered (a failed request costs no wait: B reads {-out.interval.rel:.1%} "
                            "lower there) (3 rounds)")
    assert out.notes[1] == "errors A 0 of 30, B 6 of 30" and len(out.notes) == 2
    # the same in tok/s: B lower, the side that failed more comes out worse: said after the verdict
    out = C._outcome(s, TOKS, "difference", runs)
    assert out.state == "difference"
    assert out.sentence.endswith(" — decided after 3 rounds; B failed 6 of 30 requests (20%), A 0%")
    assert out.sentence.startswith("B is ") and " slower than A in tok/s" in out.sentence
    # a budget's end with errors keeps the budget note
    out = C._outcome(s, TOKS, "budget", runs)
    assert out.sentence.endswith(" — the budget ended after 3 rounds, undecided; B failed 6 of 30 requests (20%), "
                                 "A 0%")
    assert out.notes[1:] == ["errors A 0 of 30, B 6 of 30",
                             "the budget ended before the interval resolved (a longer --budget narrows it)"]


def test_outcome_runs_without_request_counts_add_no_error_note():
    runs: list[C.RoundRun] = [{"side": "A", "value": 1.0, "round": 1}, {"side": "B", "value": 1.0, "round": 1}]
    out = C._outcome(_seq([110.0, 111.0, 112.0]), TOKS, "difference", runs)
    assert len(out.notes) == 1 and out.runs is runs


def test_outcome_before_an_interval():
    runs: list[C.RoundRun] = [{"side": "A", "value": 1.0, "errors": 1, "requests": 4},
                              {"side": "B", "value": 1.0, "requests": 4}]
    s = _seq([110.0, 120.0])
    out = C._outcome(s, TOKS, "budget", runs)
    assert out.sentence == "unresolved: 2 round(s), an interval needs 3; errors A 1 of 4, B 0 of 4"
    assert (out.state, out.interval, out.means, out.runs, out.notes, out.detectable) == (
        "budget", None, (100.0, 115.0), runs, [], None)


def test_failed_outcome_keeps_the_rounds():
    runs: list[C.RoundRun] = [{"side": "A", "value": 1.0, "round": 1, "errors": 2, "requests": 10},
                              {"side": "B", "value": 1.0, "round": 1, "errors": 0, "requests": 10}]
    s = _seq([110.0], runs)
    out = C.failed_outcome(s, TOKS, "B's run 2 gave no tok/s")
    assert out.sentence == "failed after 1 complete round(s): B's run 2 gave no tok/s; errors A 2 of 10, B 0 of 10"
    assert (out.state, out.interval, out.means) == ("failed", None, (100.0, 110.0))
    assert out.runs == runs and out.runs is not s.runs
    out = C.failed_outcome(C.Sequential(), TOKS, "x")
    assert out.sentence == "failed after 0 complete round(s): x; errors A 0 of 0, B 0 of 0"
    assert math.isnan(out.means[0]) and math.isnan(out.means[1]) and out.runs == []
    s = _seq([110.0, 111.0, 112.0])
    out = C.failed_outcome(s, TOKS, "x")
    assert out.interval == s.interval() and out.interval.confidence == pytest.approx(1 - LOOK1)


def test_cv():
    assert C._cv([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)  # SD √2 of mean 2
    assert C._cv([99.0, 101.0, 99.0, 101.0]) == pytest.approx(math.sqrt(4 / 3) / 100)
    assert C._cv([5.0]) == 0.0 and C._cv([]) == 0.0
    assert C._cv([-1.0, 1.0]) == 0.0  # mean 0: no CV


# ---- one run's figure from its records --------------------------------------------------------------------------
S = 1_000_000_000


def rec(rid, sched_s, tokens_s, error=None):
    ts = [round(t * S) for t in tokens_s]
    return RequestRecord("r", rid, "instances", "null", "m", 0, 1, 1, output_tokens=len(ts),
                         t_scheduled_ns=round(sched_s * S), t_started_ns=round(sched_s * S),
                         t_first_token_ns=ts[0] if ts else None, t_done_ns=ts[-1] if ts else None, token_ns=ts,
                         error=error)


RECS = [rec(0, 1.0, [1.5, 2.0]), rec(1, 1.0, [2.5, 2.8, 3.0])]  # TTFT 0.5 and 1.5 s; TPOT 0.5 and 0.25 s


def test_figure_tok_s():
    # 5 tokens over the first scheduled (1 s) → last done (3 s) + 1 ns
    assert C.figure(RECS, TOKS, None) == pytest.approx(5 / (2 + 1e-9), rel=1e-12)
    assert C.figure([rec(0, 0.0, [])], TOKS, None) is None


def test_figure_latencies_in_ms():
    assert C.figure(RECS, TPOT, None) == pytest.approx(375.0)  # median of 500 and 250 ms
    assert C.figure(RECS, TTFT, None) == pytest.approx(500 + 0.99 * 1000)  # p99 of 0.5 and 1.5 s: 1490 ms
    assert isinstance(C.figure(RECS, TPOT, None), float)
    assert C.figure([rec(0, 0.0, [1.0])], TPOT, None) is None  # one token: no TPOT
    assert C.figure([], TTFT, None) is None


def test_figure_goodput():
    slo = SLO("t", "ttft 0.6 s", ttft_s=0.6)
    assert C.figure(RECS, GOOD, slo) == pytest.approx(2 / 2.0, rel=1e-13)  # the first request's 2 tokens, 1 → 3 s
    assert C.figure(RECS, GOOD, SLO("t", "none met", ttft_s=0.1)) == 0.0
    assert C.figure(RECS, GOOD, None) is None  # no SLO: no goodput
    assert C.figure([rec(0, 0.0, [])], GOOD, slo) is None  # nothing done: no span
    assert C.figure([rec(0, 1.0, [1.0])], GOOD, slo) is None  # done as scheduled: a span of 0 s, no goodput
