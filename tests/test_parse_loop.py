"""The loop-mode nvidia-smi's output read into samples (console/sources/parse_loop.py): framed by
timestamps whatever the probe's reads cut, "no process" from the GPU loop's clock, a half-written
sample never used, garbage never a crash."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from console.sources.parse_loop import LoopState, parse_loop_state, stamp_of

GPU_ROW = "{i}, GPU-{i}, H100, 00000000:1{i}:00.0, {mib}, 81559, 0, Enabled, Disabled, None"


def stamp(t: int) -> str:
    return f"2026/12/02 01:{t // 60:02d}:{t % 60:02d}.{(t * 7) % 1000:03d}"


def gpu_sample(t: int, mib=(100, 200)) -> str:
    return "".join(f"{stamp(t)}, {GPU_ROW.format(i=i, mib=m)}\n" for i, m in enumerate(mib))


def apps_sample(t: int, pids=(4242,)) -> str:
    return "".join(f"{stamp(t)}, {p}, GPU-0, 900, python\n" for p in pids)


def test_a_sample_is_whole_once_the_next_has_begun_and_no_process_is_known_from_the_gpu_clock():
    s = LoopState()
    assert not s.feed(gpu_sample(1), apps_sample(1)) and s.texts() is None   # the first: maybe half
    assert s.feed(gpu_sample(2), apps_sample(2))
    gpu, apps = s.texts()
    assert gpu.splitlines() == [GPU_ROW.format(i=0, mib=100), GPU_ROW.format(i=1, mib=200)]
    assert apps == "4242, GPU-0, 900, python\n"
    # the worker ended: the apps loop writes nothing more
    s.feed(gpu_sample(3, (5, 200)), "")
    assert s.texts()[1] == "4242, GPU-0, 900, python\n", "a sample ago it ran: the newest waits a probe"
    s.feed(gpu_sample(4, (5, 200)), "")
    gpu, apps = s.texts()
    assert apps == "" and gpu.startswith("0, GPU-0, H100, 00000000:10:00.0, 5,"), (gpu, apps)


def test_a_half_written_newest_sample_is_not_used():
    s = LoopState()
    s.feed(gpu_sample(1) + gpu_sample(2), "")
    whole = gpu_sample(3, (7, 8))
    first_line = whole.splitlines(keepends=True)[0]
    s.feed(first_line, "")                             # GPU 1's line not written yet
    assert "H100, 00000000:10:00.0, 100," in s.texts()[0], "sample 2 stands while 3 is half"
    s.feed(whole[len(first_line):], "")
    assert "00000000:10:00.0, 7," in s.texts()[0] and "00000000:11:00.0, 8," in s.texts()[0]


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8))
def test_reads_cut_anywhere_give_the_same_samples(cuts):
    text = "".join(gpu_sample(t, (t, 2 * t)) for t in range(1, 6))
    apps = "".join(apps_sample(t) for t in range(1, 6))
    whole = LoopState()
    whole.feed(text, apps)
    pieces = LoopState()
    at = 0
    for cut in sorted(c % (len(text) + 1) for c in cuts) + [len(text)]:
        pieces.feed(text[at:cut], apps if at == 0 else "")
        at = cut
    assert pieces.texts() == whole.texts()


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=600), st.text(max_size=600), st.text(max_size=200))
def test_garbage_is_never_a_crash(gpu, apps, state_text):
    s = LoopState()
    s.feed(gpu, apps)
    s.feed(gpu_sample(9), "")
    s.texts()
    what, pids = parse_loop_state(state_text)
    assert what in ("", "running", "started", "died", "died+started", "failed")
    assert all(isinstance(p, int) and p > 1 for p in pids)


def test_error_lines_are_noise_not_samples():
    s = LoopState()
    s.feed("Failed to initialize NVML: Driver/library version mismatch\n", "")
    assert s.texts() is None and s.gpu.noise == ["Failed to initialize NVML: Driver/library version mismatch"]
    assert stamp_of("2026/13/02 01:00:00.000, x") is None and stamp_of("x, y") is None


def test_the_loop_section_says_what_runs():
    assert parse_loop_state("running 411 412\n") == ("running", (411, 412))
    assert parse_loop_state("died 411 412\nstarted 500 501\n") == ("died+started", (500, 501))
    assert parse_loop_state("failed\n") == ("failed", ())
    assert parse_loop_state("running 1 0\n") == ("running", ()), "never PID 1 or 0"
