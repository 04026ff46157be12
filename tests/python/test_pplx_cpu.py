"""The arithmetic of nvshmem_tutorial.pplx's combine on the CPU (PyTorch,
no GPU, no job): pplx's dtype rules (expert_y float32, bf16 or fp16;
out_tokens bf16 or fp16, any pairing) through the parts each combine moves
and the kernel's sum, emulated here (fp32, k in order, rounded once to the
output or kept as float32), against the exact weighted sum; and the rows
bound_m leaves alone. pplx_job.py runs the same on GPUs, end to end."""
import pytest

torch = pytest.importorskip("torch")

from job_checks import assert_rounded_once  # noqa: E402
from nvshmem_tutorial.pplx import (  # noqa: E402
    COMBINE_ROW_DTYPES,
    EXPERT_Y_DTYPES,
    OUT_DTYPES,
    finish_sums,
    live_rows,
    send_parts,
    write_live_rows,
)


def kernel_sum(rows, weights, out_dtype):
    """What one low-latency combine returns for [T, K, H] rows of one part:
    sum over k of w[t, k] * row in fp32, k in order, rounded once to
    out_dtype (float32: not rounded)."""
    assert rows.dtype in COMBINE_ROW_DTYPES
    acc = torch.zeros(rows.shape[0], rows.shape[2], dtype=torch.float32)
    for k in range(rows.shape[1]):
        acc = acc + weights[:, k:k + 1] * rows[:, k].float()
    return acc.to(out_dtype)


def combined(y, weights, out_dtype):
    """The pplx combine's result as nvshmem_tutorial.pplx computes it."""
    parts = send_parts(y)
    part_out = out_dtype if len(parts) == 1 else torch.float32
    return finish_sums([kernel_sum(p, weights, part_out) for p in parts], out_dtype)


def random_rows(g, shape, dtype, octaves):
    """Random values over 2 * octaves binary orders of magnitude, both signs."""
    v = torch.randn(shape, generator=g, dtype=torch.float64)
    return (v * torch.exp2(torch.randint(-octaves, octaves + 1, shape, generator=g).double())).to(dtype)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("y_dtype", EXPERT_Y_DTYPES, ids=str)
def test_combine_is_the_fp32_sum_rounded_once(y_dtype, out_dtype):
    g = torch.Generator().manual_seed(7)
    T, K, H = 64, 8, 256
    # Positive weights and one row per token (as pplx's test): no cancellation,
    # so one unit in the last place bounds a once-rounded sum's error.
    y = random_rows(g, (T, 1, H), y_dtype, 6).expand(T, K, H)
    w = torch.rand(T, K, generator=g, dtype=torch.float32)
    exact = (w.double().unsqueeze(2) * y.double()).sum(1)
    got = combined(y, w, out_dtype)
    assert got.dtype == out_dtype and got.shape == (T, H)
    assert_rounded_once(got, exact, out_dtype, f"{y_dtype} -> {out_dtype}")


def test_accumulating_in_fp16_is_not_rounding_once():
    """pplx's own test sums its reference in the output dtype; at top-4 and
    hidden 1024 that reference strays from the once-rounded sum by more
    than one unit, which is why the GPU job checks against the exact sum."""
    g = torch.Generator().manual_seed(0)
    T, K, H = 19, 4, 1024
    x = random_rows(g, (T, H), torch.float16, 0) * 1.5
    w = torch.rand(T, K, generator=g)
    ref = torch.zeros(T, H, dtype=torch.float16)
    for k in range(K):  # pplx's: ref[t] += x[t] * weight (a Python float), in fp16
        ref = (ref.float() + (x.float() * w[:, k:k + 1]).to(torch.float16).float()).to(torch.float16)
    exact = w.double().sum(1, keepdim=True) * x.double()
    with pytest.raises(AssertionError, match="unit in the last place"):
        assert_rounded_once(ref, exact, torch.float16, "fp16-accumulated")
    assert_rounded_once(combined(x.unsqueeze(1).expand(T, K, H), w, torch.float16), exact, torch.float16, "ours")


def test_float32_parts_carry_17_bits():
    g = torch.Generator().manual_seed(3)
    y = random_rows(g, (4096,), torch.float32, 40)
    hi, lo = send_parts(y)
    assert hi.dtype == lo.dtype == torch.bfloat16
    err = (hi.double() + lo.double() - y.double()).abs()
    assert bool((err <= 2.0 ** -17 * y.double().abs()).all()), float((err / y.double().abs()).max())


def test_16_bit_expert_y_travels_as_it_is():
    for dtype in COMBINE_ROW_DTYPES:
        y = torch.randn(3, 5).to(dtype)
        (part,) = send_parts(y)
        assert part is y
    with pytest.raises(TypeError, match="expert_y"):
        send_parts(torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="single part"):
        finish_sums([torch.zeros(2, 2, dtype=torch.float32)], torch.float16)


def test_rows_at_or_past_bound_m_keep_what_they_hold():
    out = torch.full((5, 4), float("nan"), dtype=torch.float16)
    result = torch.arange(20, dtype=torch.float16).view(5, 4)
    write_live_rows(out, result, live_rows(torch.tensor([3], dtype=torch.uint32), 5, out.device))
    assert torch.equal(out[:3], result[:3]) and bool(out[3:].isnan().all())
    write_live_rows(out, result, live_rows(None, 5, out.device))
    assert torch.equal(out, result)
