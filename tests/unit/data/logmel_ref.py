#!/usr/bin/python3
"""Reference log-mel features for test_data_logmel (tests/unit/data/test_logmel.c).

Writes tests/fixtures/data/logmel_ref.json: for each configuration below, the
features of a synthetic clip, computed with NumPy (float64, numpy.fft.rfft) by
the definition of device/data/include/starling/logmel.h. The filter bank is
torchaudio.functional.melscale_fbanks(norm=None, mel_scale="htk") written out
(torchaudio is not needed); when torchaudio is installed the script checks
itself against it.

The clip (both sides make it; the C test from the same formula):
    t = i / rate, T = n / rate, i = 0 .. n - 1
    x = 0.5 sin(2 pi 440 t) + 0.25 sin(2 pi 1250 t + 0.3)
        + 0.2 sin(2 pi (200 t + 2800 t^2 / (2 T)))      (a chirp, 200 -> 3000 Hz)
rounded to float32.

Run: /usr/bin/python3 tests/unit/data/logmel_ref.py [OUTPUT]
"""
import json
import os
import sys

import numpy as np

CASES = [
    # 0.5 s at 16 kHz, the usual keyword-spotting front end; the clip is shorter than the
    # frames span (zero-padded)
    dict(sample_rate=16000, n_fft=512, hop=160, n_mels=40, frames=51, fmin=20.0, fmax=8000.0,
         n=8000),
    # fmin 0 with many mels: the lowest filters fall between bins (all-zero rows); late frames
    # entirely in the padding
    dict(sample_rate=16000, n_fft=256, hop=128, n_mels=64, frames=20, fmin=0.0, fmax=8000.0,
         n=2000),
    # a clip longer than the frames span (cut), frames far apart
    dict(sample_rate=16000, n_fft=1024, hop=400, n_mels=80, frames=5, fmin=125.0, fmax=7600.0,
         n=8000),
    # another rate, the smallest FFT
    dict(sample_rate=8000, n_fft=64, hop=32, n_mels=10, frames=8, fmin=100.0, fmax=4000.0,
         n=300),
]


def clip(n, rate):
    t = np.arange(n, dtype=np.float64) / rate
    total = n / rate
    x = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.25 * np.sin(2 * np.pi * 1250 * t + 0.3) +
         0.2 * np.sin(2 * np.pi * (200 * t + 2800 * t * t / (2 * total))))
    return x.astype(np.float32)


def hz_to_mel(f):
    return 2595.0 * np.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def fbanks(c):
    """(n_fft / 2 + 1, n_mels): torchaudio's _create_triangular_filterbank."""
    freqs = np.arange(c["n_fft"] // 2 + 1) * c["sample_rate"] / c["n_fft"]
    h = mel_to_hz(np.linspace(hz_to_mel(c["fmin"]), hz_to_mel(c["fmax"]), c["n_mels"] + 2))
    f_diff = h[1:] - h[:-1]
    slopes = h[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return np.maximum(0.0, np.minimum(down, up))


def logmel(x, c):
    n_fft, hop, frames = c["n_fft"], c["hop"], c["frames"]
    span = (frames - 1) * hop + n_fft
    padded = np.zeros(span)
    k = min(len(x), span)
    padded[:k] = x[:k]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    framed = np.stack([padded[t * hop:t * hop + n_fft] * window for t in range(frames)])
    power = np.abs(np.fft.rfft(framed, axis=1)) ** 2
    return np.log(power @ fbanks(c) + 1e-6).T  # [mel][frame]


def check_torchaudio(c):
    try:
        import torch
        import torchaudio.functional as F
    except ImportError:
        return
    fb = F.melscale_fbanks(c["n_fft"] // 2 + 1, c["fmin"], c["fmax"], c["n_mels"],
                           c["sample_rate"], norm=None, mel_scale="htk").double().numpy()
    assert np.abs(fb - fbanks(c)).max() < 1e-4, "the filter bank differs from torchaudio's"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "..", "..", "fixtures", "data", "logmel_ref.json")
    cases = []
    for c in CASES:
        check_torchaudio(c)
        features = logmel(clip(c["n"], c["sample_rate"]), c)
        case = dict(c)
        case["logmel"] = [round(float(v), 5) for v in features.reshape(-1)]
        cases.append(case)
    doc = {
        "written_by": "tests/unit/data/logmel_ref.py (NumPy %s)" % np.__version__,
        "definition": "device/data/include/starling/logmel.h; logmel is [mel][frame], row-major",
        "clip": "0.5 sin(2 pi 440 t) + 0.25 sin(2 pi 1250 t + 0.3) + "
                "0.2 sin(2 pi (200 t + 2800 t^2 / (2 T))), t = i / rate, T = n / rate, float32",
        "cases": cases,
    }
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
