#!/usr/bin/python3
"""prepare.py OUTDIR [--small] - the kws example's data (see prepare.sh)."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import number, write_contract, write_uris  # noqa: E402

WORDS = ["yes", "no", "up", "down", "left", "right", "stop", "go"]
VOICES = ["en", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd",
          "en-029"]
VARIANTS = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5"]
SPEEDS = [120, 140, 160, 180, 200]
PITCHES = [30, 45, 60, 75]
TRAIN, TEST = 240, 60            # clips a word
SMALL_TRAIN, SMALL_TEST = 60, 15
RATE = 16000
SEED = 20261203
AUDIO = {"sample_rate": RATE, "n_fft": 512, "hop": 160, "n_mels": 40, "frames": 98,
         "fmin": 20.0, "fmax": 8000.0}


def synthesise(word, voice, variant, speed, pitch, scratch):
    """espeak-ng's 22,050 Hz 16-bit mono WAV of @word (through the file @scratch), as float
    samples."""
    from scipy.io import wavfile
    subprocess.run(["espeak-ng", "-v", "%s+%s" % (voice, variant), "-s", str(speed),
                    "-p", str(pitch), "-w", scratch, word], check=True, capture_output=True)
    rate, pcm = wavfile.read(scratch)
    os.remove(scratch)
    return rate, pcm.astype("float64") / 32768.0


def clip(np, signal, rate, rng):
    """A 1 s clip at 16 kHz: the word (silence trimmed) at a random offset, quiet noise."""
    from scipy.signal import resample_poly
    loud = np.flatnonzero(np.abs(signal) > 0.01 * np.abs(signal).max())
    signal = signal[loud[0]:loud[-1] + 1]
    word = resample_poly(signal, RATE, rate)[:RATE]
    out = rng.normal(0.0, 0.002, RATE)
    at = int(rng.integers(0, RATE - len(word) + 1))
    out[at:at + len(word)] += word
    return np.clip(np.round(out * 32767.0), -32768, 32767).astype(np.int16)


def logmel(np, pcm):
    """The contract's log-mel features (starling/logmel.h's definition, in float64)."""
    c = AUDIO
    n_fft, hop, frames = c["n_fft"], c["hop"], c["frames"]
    span = (frames - 1) * hop + n_fft
    x = np.zeros(span)
    k = min(len(pcm), span)
    x[:k] = pcm[:k] / 32768.0
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    framed = np.stack([x[t * hop:t * hop + n_fft] * window for t in range(frames)])
    power = np.abs(np.fft.rfft(framed, axis=1)) ** 2
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    h = 700.0 * (10.0 ** (np.linspace(mel(c["fmin"]), mel(c["fmax"]), c["n_mels"] + 2) / 2595.0)
                 - 1.0)
    freqs = np.arange(n_fft // 2 + 1) * c["sample_rate"] / n_fft
    slopes = h[None, :] - freqs[:, None]
    diff = h[1:] - h[:-1]
    fb = np.maximum(0.0, np.minimum(-slopes[:, :-2] / diff[:-1], slopes[:, 2:] / diff[1:]))
    return np.log(power @ fb + 1e-6)


def main():
    try:
        import numpy as np
        import scipy.io.wavfile  # noqa: F401
        import scipy.signal  # noqa: F401
    except ImportError as e:
        print("kws: %s (Debian: apt-get install python3-numpy python3-scipy)" % e,
              file=sys.stderr)
        sys.exit(77)
    if subprocess.run(["sh", "-c", "command -v espeak-ng"], capture_output=True).returncode:
        print("kws: espeak-ng is missing (Debian: apt-get install espeak-ng)", file=sys.stderr)
        sys.exit(77)
    from scipy.io import wavfile
    out = os.path.abspath(sys.argv[1])
    small = "--small" in sys.argv[2:]
    ntrain, ntest = (SMALL_TRAIN, SMALL_TEST) if small else (TRAIN, TEST)
    combos = [(v, var, s, p) for v in VOICES for var in VARIANTS for s in SPEEDS for p in PITCHES]
    jobs = []
    for w, word in enumerate(WORDS):
        # each word its own draw of voices, speeds and pitches; the test clips' combinations
        # are none of the training clips'
        order = np.random.default_rng(SEED + w).permutation(len(combos))
        for i, j in enumerate(order[:TRAIN + TEST]):
            part = "train" if i < TRAIN else "test"
            if (part == "train" and i >= ntrain) or (part == "test" and i - TRAIN >= ntest):
                continue
            jobs.append((word, part, i, combos[j]))
    for part in ("train", "test"):
        for word in WORDS:
            os.makedirs(os.path.join(out, part, word), exist_ok=True)

    def make(job):
        word, part, i, (voice, variant, speed, pitch) = job
        scratch = os.path.join(out, part, word, ".%03d.espeak.wav" % i)
        rate, signal = synthesise(word, voice, variant, speed, pitch, scratch)
        rng = np.random.default_rng([SEED, WORDS.index(word), i])
        pcm = clip(np, signal, rate, rng)
        name = "%03d-%s-%s-s%d-p%d.wav" % (i, voice, variant, speed, pitch)
        wavfile.write(os.path.join(out, part, word, name), RATE, pcm)
        return part, pcm

    total = total2 = 0.0
    count = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for part, pcm in pool.map(make, jobs):
            if part == "train":
                f = logmel(np, pcm)
                total += f.sum()
                total2 += (f * f).sum()
                count += f.size
    mean = total / count
    std = (total2 / count - mean * mean) ** 0.5
    contract = {
        "contract": 1,
        "input": {"shape": [1, AUDIO["n_mels"], AUDIO["frames"]]},
        "label": {"kind": "class", "classes": WORDS},
        "preprocess": {"audio": AUDIO,
                       "standardize": {"mean": number(mean), "std": number(std)}},
        "min_samples": 1,
        "evaluation": {"share": 0.1},
    }
    write_contract(out, contract)
    write_uris(out, "wav:%s/train" % out, "wav:%s/test" % out)
    print("kws: %d train and %d test clips of %s in %s/{train,test}/<word>/" %
          (ntrain * len(WORDS), ntest * len(WORDS), " ".join(WORDS), out))


if __name__ == "__main__":
    main()
