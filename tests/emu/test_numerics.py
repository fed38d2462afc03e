"""rocke.emu.numerics against torch's IEEE half/bfloat16 and fp8 *fnuz dtypes."""

import numpy as np
import pytest
import torch

from rocke.emu import numerics

TORCH_FP8 = {"e4m3fnuz": torch.float8_e4m3fnuz, "e5m2fnuz": torch.float8_e5m2fnuz}


def _torch_fp8_bits(values: np.ndarray, fmt: str) -> np.ndarray:
    return torch.from_numpy(values.astype(np.float32)).to(TORCH_FP8[fmt]).view(torch.uint8).numpy()


def _wide_f32_sample(rng, size=20000):
    """Random f32 values over many binades, both signs, plus specials."""
    mantissa = rng.uniform(1.0, 2.0, size)
    exponent = rng.integers(-30, 30, size)
    sign = rng.choice([-1.0, 1.0], size)
    values = (sign * mantissa * np.exp2(exponent)).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 65504, 65520, 3.4e38],
                        dtype=np.float32)
    return np.concatenate([values, specials])


@pytest.mark.parametrize("fmt", ["e4m3fnuz", "e5m2fnuz"])
def test_fp8_decode_all_codes_matches_torch(fmt):
    codes = np.arange(256, dtype=np.uint8)
    expected = torch.from_numpy(codes).view(TORCH_FP8[fmt]).float().numpy()
    got = numerics.fp8_bits_to_f32(codes, fmt)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)  # NaN at 0x80 compares equal in assert_array_equal
    assert np.isnan(got[0x80]) and np.isfinite(np.delete(got, 0x80)).all()


@pytest.mark.parametrize("fmt,max_value", [("e4m3fnuz", 240.0), ("e5m2fnuz", 57344.0)])
def test_fp8_limits(fmt, max_value):
    assert numerics.FP8_MAX[fmt] == max_value
    assert numerics.fp8_bits_to_f32(np.array([0x7F]), fmt)[0] == max_value
    assert numerics.fp8_bits_to_f32(np.array([0xFF]), fmt)[0] == -max_value


@pytest.mark.parametrize("fmt", ["e4m3fnuz", "e5m2fnuz"])
def test_fp8_encode_without_saturation_matches_torch(fmt):
    # torch's fnuz conversion is RNE with out-of-range -> NaN, the clamp-less hardware behaviour.
    values = _wide_f32_sample(np.random.default_rng(1))
    np.testing.assert_array_equal(numerics.f32_to_fp8_bits(values, fmt, saturate=False),
                                  _torch_fp8_bits(values, fmt))


@pytest.mark.parametrize("fmt", ["e4m3fnuz", "e5m2fnuz"])
def test_fp8_encode_with_saturation_clamps_to_max(fmt):
    values = _wide_f32_sample(np.random.default_rng(2))
    max_value = numerics.FP8_MAX[fmt]
    clamped = np.where(np.isnan(values), values, np.clip(values, -max_value, max_value))
    np.testing.assert_array_equal(numerics.f32_to_fp8_bits(values, fmt, saturate=True),
                                  _torch_fp8_bits(clamped, fmt))
    assert numerics.f32_to_fp8_bits(np.float32(np.inf), fmt, True) == 0x7F
    assert numerics.f32_to_fp8_bits(np.float32(-np.inf), fmt, True) == 0xFF
    assert numerics.f32_to_fp8_bits(np.float32(np.nan), fmt, True) == 0x80


@pytest.mark.parametrize("fmt", ["e4m3fnuz", "e5m2fnuz"])
def test_fp8_round_trip_every_code(fmt):
    codes = np.array([c for c in range(256) if c != 0x80], dtype=np.uint8)
    decoded = numerics.fp8_bits_to_f32(codes, fmt)
    np.testing.assert_array_equal(numerics.f32_to_fp8_bits(decoded, fmt, saturate=False), codes)


def test_fp8_e4m3_rounding_edges_by_hand():
    # 240 is the max; 248 is the tie between 240 (odd mantissa) and 256 -> rounds to 256 = overflow.
    x = np.array([247.9, 248.0, -0.0, -1e-30, 2.0 ** -11, 1.5 * 2.0 ** -10], dtype=np.float32)
    assert list(numerics.f32_to_fp8_bits(x, "e4m3fnuz", False)) == [0x7F, 0x80, 0x00, 0x00, 0x00, 0x02]
    assert list(numerics.f32_to_fp8_bits(x, "e4m3fnuz", True))[:2] == [0x7F, 0x7F]


def test_bad_fp8_format_is_rejected():
    with pytest.raises(ValueError, match="fmt"):
        numerics.fp8_bits_to_f32(np.array([1]), "e4m3fn")
    with pytest.raises(ValueError, match="fmt"):
        numerics.f32_to_fp8_bits(np.array([1.0]), "e5m2", True)


def test_f16_conversions_match_torch():
    values = _wide_f32_sample(np.random.default_rng(3))
    expected = torch.from_numpy(values).half().view(torch.int16).numpy().view(np.uint16)
    got = numerics.f32_to_f16_bits(values)
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(got[finite], expected[finite])
    assert ((got[~finite] & 0x7E00) == 0x7E00).all()  # quiet NaN
    all_halves = np.arange(65536, dtype=np.uint32)
    expected_values = torch.from_numpy(all_halves.astype(np.uint16).view(np.int16)).view(torch.float16).float()
    np.testing.assert_array_equal(numerics.f16_bits_to_f32(all_halves), expected_values.numpy())


def test_bf16_conversions_match_torch():
    values = _wide_f32_sample(np.random.default_rng(4))
    finite = ~np.isnan(values)
    expected = torch.from_numpy(values).bfloat16().view(torch.int16).numpy().view(np.uint16)
    got = numerics.f32_to_bf16_bits(values)
    np.testing.assert_array_equal(got[finite], expected[finite])
    signaling_nan = np.array([0x7F800001], dtype=np.uint32).view(np.float32)
    assert numerics.f32_to_bf16_bits(signaling_nan)[0] == 0x7FC0  # stays NaN, made quiet
    all_bf16 = np.arange(65536, dtype=np.uint32)
    expected_values = torch.from_numpy(all_bf16.astype(np.uint16).view(np.int16)).view(torch.bfloat16).float()
    np.testing.assert_array_equal(numerics.bf16_bits_to_f32(all_bf16), expected_values.numpy())


def test_denormal_flushing():
    x = np.array([1e-40, -1e-40, 1.2e-38, -0.0, 1.0], dtype=np.float32)
    flushed = numerics.flush_f32_denormals(x)
    np.testing.assert_array_equal(flushed, np.array([0.0, -0.0, 1.2e-38, -0.0, 1.0], dtype=np.float32))
    assert np.signbit(flushed[1])
    h = np.array([1e-6, -1e-6, 6.2e-5, 1.0], dtype=np.float16)
    flushed_h = numerics.flush_f16_denormals(h)
    np.testing.assert_array_equal(flushed_h, np.array([0.0, -0.0, 6.2e-5, 1.0], dtype=np.float16))
    assert np.signbit(flushed_h[1]) and flushed_h.dtype == np.float16
