"""The measuring programs of tools/: bench, precision_check, load_check, thread_probe.

What they measure is for a person to read, not for a test (no speed is asserted here).
What is tested: the bench's target, judged only where it was set and never on a CPU;
precision_check's choice of precision (what precision="auto" picks, fp16 on a T4);
and every refusal, which must come before any work, as one `error:` line that says
what to do. Runs are tiny: one ci-preset batch, two training steps, a fake kernel.
"""

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atkit import runtime
from conftest import ROOT
from tools import bench, errors, load_check, precision_check, thread_probe
from tools import train as cli

TINY_BENCH = ["--preset", "ci", "--batches", "1", "--steps", "1", "--rounds", "1"]


def one_error_line(capsys, prog) -> str:
    """The one `error:` line a tool printed (and nothing like a traceback)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err, err
    return lines[0]


def run(main, prog, argv) -> int:
    """A tool's status as its command line returns it (errors.run_main)."""
    try:
        return errors.run_main(lambda: main(argv), prog)
    except SystemExit as exit_:  # argparse's refusals
        return exit_.code


def must_not_run(*args, **kwargs):
    pytest.fail("the tool started its work before refusing")


# ------------------------------------------------------------------- bench


def test_bench_target_is_the_gpu_presets_own_run(lib):
    """The target's setting is `--preset gpu` as it stands; any flag that changes
    the model, the vocabulary, the precision, compiling or the paths is named."""

    def differ(*argv):
        args, cfg = bench.parse_args(lib, list(argv))
        vocab = args.vocab or cfg.bpe_size
        precision = args.precision or cfg.precision
        compiled = cfg.compile if args.compile is None else args.compile
        return bench.target_setting(lib, args, vocab, precision, compiled)

    assert differ("--preset", "gpu") == []
    assert differ("--preset", "gpu", "--steps", "9", "--rounds", "9") == []
    assert differ("--preset", "gpu", "--size", "base") == ["--size base"]
    assert differ("--preset", "gpu", "--vocab", "37000") == ["--vocab 37000"]
    assert differ("--preset", "gpu", "--precision", "fp32") == ["--precision fp32"]
    assert differ("--preset", "gpu", "--no-compile") == ["--no-compile"]
    assert differ("--preset", "gpu", "--paths", "fast") == ["--paths fast"]
    assert differ("--preset", "gpu", "--set", "N=2") == ["--set N"]
    assert "--preset cpu" in differ("--preset", "cpu")


def fake_figures(speedup, tokens_per_s, mfu=None):
    fast = {"tokens_per_s": tokens_per_s}
    if mfu is not None:
        fast["mfu"] = mfu
    didactic = {"tokens_per_s": tokens_per_s / speedup}
    return {"didactic": didactic, "fast": fast, "speedup": speedup}


H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    "device, differ, speedup, tokens, met, words",
    [
        (H100, [], 6.0, 400_000, True, ["target met", "MFU 23.0%"]),
        (H100, [], 4.0, 400_000, False, ["NOT met", "speedup 4.00x < 5x"]),
        (H100, [], 6.0, 250_000, False, ["NOT met", "250,000 < 300,000"]),
        ("NVIDIA A100-SXM4-80GB", [], 6.0, 400_000, None, ["not an H100"]),
        ("NVIDIA GH200 480GB", [], 6.0, 400_000, None, ["not an H100"]),
        (H100, ["--size base"], 6.0, 400_000, None, ["not the target's", "--size"]),
    ],
)
def test_bench_judges_the_target_only_where_it_was_set(
    lib, device, differ, speedup, tokens, met, words
):
    import pipeline as pl

    lines, record = bench.judge_target(
        lib, differ, device, fake_figures(speedup, tokens, mfu=0.23)
    )
    text = "\n".join(lines)
    gpu = pl.run_config("gpu")
    if met is None:  # issue 68: no target figure beside figures it was not set for
        assert lines[0].startswith("no speed target judged here: ") and len(lines) == 1
        assert "fast >= " not in text and "--preset gpu` on one H100" in text
    else:
        assert "fast >= 5x didactic and >= 300,000 label tok/s" in lines[0]
        assert f"d_model={gpu.model.d_model}" in lines[0]
        assert f"vocab={gpu.bpe_size}" in lines[0] and "H100" in lines[0]
        assert f"{speedup:.2f}x" in text and f"{tokens:,}" in text  # measured, beside
    for word in words:
        assert word in text
    assert record["met"] is met and record["judged"] is (met is not None)


def test_bench_on_a_cpu_prints_the_target_as_a_gpu_one(
    lib, tmp_path, monkeypatch, capsys
):
    """A tiny ci-preset run (memory children faked): the figures go to --json
    atomically, and one line says that no target is judged on a CPU (a GPU target,
    not measured here), with no target figure printed beside the CPU's (issue 68)."""
    monkeypatch.setattr(bench, "cpu_peak_mib", lambda argv, path: 1.0)
    out = tmp_path / "bench.json"
    assert bench.main([*TINY_BENCH, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fast >= " not in printed and "target:" not in printed  # issue 68
    target = printed[printed.index("no speed target judged here") :]
    assert "GPU target" in target and "CPU" in target and "not measured" in target
    assert "measured:" not in target
    figures = json.loads(out.read_text())
    assert set(figures) == {"didactic", "fast", "speedup", "target"}
    assert figures["target"]["judged"] is False and figures["target"]["met"] is None
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # no temporary


def fifo(tmp_path):
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def dangling(tmp_path):
    path = tmp_path / "link.json"
    path.symlink_to(tmp_path / "gone" / "x.json")
    return path


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda t: t, ["is a folder", "give a file name"]),
        (lambda t: Path("/proc/x.json"), ["cannot be written", "give a folder"]),
        (lambda t: t / "missing" / "b.json", ["does not exist", "mkdir -p"]),
        (lambda t: t / "file" / "b.json", ["not a folder"]),
        (fifo, ["not a regular file"]),
        (dangling, ["symbolic link", "does not exist"]),
    ],
    ids=["folder", "proc", "missing-folder", "under-a-file", "fifo", "dangling"],
)
def test_bench_refuses_a_bad_json_path_before_measuring(
    lib, tmp_path, monkeypatch, capsys, make, words
):
    (tmp_path / "file").write_text("")
    path = make(tmp_path)
    monkeypatch.setattr(bench, "build", must_not_run)
    assert run(bench.main, bench.PROG, [*TINY_BENCH, "--json", str(path)]) == 2
    line = one_error_line(capsys, bench.PROG)
    assert "--json" in line
    for word in words:
        assert word in line


def test_bench_refuses_a_read_only_folder(lib, read_only, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(bench, "build", must_not_run)
    argv = [*TINY_BENCH, "--json", str(read_only / "b.json")]
    assert run(bench.main, bench.PROG, argv) == 2
    assert "cannot be written" in one_error_line(capsys, bench.PROG)


def test_bench_names_a_full_disk(lib, small_disk, monkeypatch, capsys):  # noqa: F811
    """The path passes the check (an empty file still fits); the figures do not: the
    error names the full disk and no half-written file is left."""
    monkeypatch.setattr(bench, "cpu_peak_mib", lambda argv, path: 1.0)
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(b"x" * 4096)
    out = small_disk / "bench.json"
    assert run(bench.main, bench.PROG, [*TINY_BENCH, "--json", str(out)]) == 2
    assert "the disk is full" in one_error_line(capsys, bench.PROG)
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_bench_refuses_a_model_larger_than_memory(lib, monkeypatch, capsys):
    """issue 56: --vocab 1000000000 is refused naming the vocabulary, before
    PyTorch fails to allocate it (a message that named no setting)."""
    monkeypatch.setattr(bench, "synthetic_pairs", must_not_run)
    status = run(bench.main, bench.PROG, [*TINY_BENCH, "--vocab", "1000000000"])
    line = one_error_line(capsys, bench.PROG)
    assert status == 2, line
    assert "vocabulary of 1,000,000,000" in line and "GiB" in line, line


def test_bench_caps_threads_at_the_cores(lib, capsys):
    cores = runtime.cores_available()
    with pytest.raises(SystemExit) as exit_:  # refused while parsing: nothing ran
        bench.parse_args(lib, ["--threads", "10000"])
    assert exit_.value.code == 2
    assert f"give at most {cores}" in one_error_line(capsys, bench.PROG)
    args, _ = bench.parse_args(lib, ["--threads", str(cores)])
    assert args.threads == cores


def test_bench_refuses_json_with_profile(lib, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(lib, ["--profile", "--json", "figures.json"])
    assert exit_.value.code == 2
    assert "leave out --json" in one_error_line(capsys, bench.PROG)


@pytest.mark.process
def test_bench_names_a_failed_memory_child():
    """The fresh process that measures a path's memory fails: its last line is
    kept in the message, not a CalledProcessError."""
    with pytest.raises(RuntimeError, match=r"fast path.*exit 2.*--vocab") as err:
        bench.cpu_peak_mib(["--preset", "ci", "--vocab", "0"], "fast")
    assert "CalledProcessError" not in str(err.value)


@pytest.mark.process
def test_bench_command_line_ends_in_one_error_line(tmp_path):
    """The real command line (python -m tools.bench), not only main()."""
    argv = [*TINY_BENCH, "--json", str(tmp_path)]
    command = [sys.executable, "-m", "tools.bench", *argv]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"{bench.PROG}: error: --json {tmp_path} is a folder; give a file name, "
        f"such as {tmp_path / 'bench.json'}"
    ]
    assert "device" not in proc.stdout  # nothing measured, nothing printed


# --------------------------------------------------------- precision_check


def fake_cpu(monkeypatch, bf16: bool):
    which = "AVX512-BF16" if bf16 else "no bfloat16 instructions"
    monkeypatch.setattr(runtime, "cpu_bf16", lambda: (bf16, which))
    cpu = importlib.import_module("torch").device("cpu")  # after the collection
    monkeypatch.setattr(runtime, "default_device", lambda: cpu)


@pytest.mark.parametrize(
    "device, capability, bf16, expected",
    [
        ("cuda", (7, 5), False, "fp16"),  # a T4
        ("cuda", (7, 0), False, "fp16"),  # a V100
        ("cuda", (8, 0), False, "bf16"),  # an A100
        ("cuda", (9, 0), False, "bf16"),  # an H100
        ("cpu", None, True, "bf16"),
        ("cpu", None, False, "fp32"),
    ],
)
def test_precision_check_follows_auto(monkeypatch, device, capability, bf16, expected):
    monkeypatch.setattr(runtime, "gpu_capability", lambda d: capability)
    fake_cpu(monkeypatch, bf16)
    name, why = precision_check.compared_precision(device)
    assert name == expected and why.startswith(f'precision="auto" is {expected}')
    assert precision_check.compared_precision(device, "bf16")[0] == "bf16"


def test_precision_check_without_bfloat16_says_so_and_stops(lib, monkeypatch, capsys):
    fake_cpu(monkeypatch, bf16=False)
    monkeypatch.setattr(cli, "train_cli", must_not_run)
    assert run(precision_check.main, precision_check.PROG, ["--preset", "ci"]) == 0
    out = capsys.readouterr()
    text = " ".join(out.out.split())  # unwrapped
    assert text.startswith('Nothing to compare: precision="auto" is fp32 on cpu')
    assert "no bfloat16 instructions" in text and out.err == ""


def refuses_before_training(tmp_path, monkeypatch, capsys, argv, ckpt=None) -> str:
    """precision_check's error line for `argv`, with training made to fail the
    test, on a CPU that "auto" takes for a bfloat16 one."""
    fake_cpu(monkeypatch, bf16=True)
    monkeypatch.setattr(cli, "train_cli", must_not_run)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(runtime.CHECKPOINTS_ENV, str(tmp_path / "ckpt"))
    if ckpt:  # the default root, ./checkpoints, leads there
        monkeypatch.delenv(runtime.CHECKPOINTS_ENV)
        (tmp_path / "checkpoints").symlink_to(ckpt)
    status = run(precision_check.main, precision_check.PROG, ["--preset", "ci", *argv])
    assert status == 2
    return one_error_line(capsys, precision_check.PROG)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--precision", "fp16"], ["fp16", "CUDA"]),
        (["--set", "precision='bf16'"], ["--precision"]),
        (["--set", "P_drop=2"], ["P_drop"]),
        ([], ["results", "not a folder"]),  # results/ is a file, below
    ],
)
def test_precision_check_refuses_before_training(
    lib, tmp_path, monkeypatch, capsys, argv, words
):
    (tmp_path / "results").write_text("")
    line = refuses_before_training(tmp_path, monkeypatch, capsys, argv)
    for word in words:
        assert word in line


def test_precision_check_read_only(lib, tmp_path, read_only, monkeypatch, capsys):  # noqa: F811
    """A read-only checkpoint root, the default one (./checkpoints) or one that
    $AT_CHECKPOINTS names, is refused before the first run trains."""
    line = refuses_before_training(tmp_path, monkeypatch, capsys, [], read_only)
    assert "checkpoint folder checkpoints/ci/precision-bf16 cannot be written" in line
    (tmp_path / "checkpoints").unlink()
    monkeypatch.setenv(runtime.CHECKPOINTS_ENV, str(read_only))
    status = run(precision_check.main, precision_check.PROG, ["--preset", "ci"])
    assert status == 2
    assert runtime.CHECKPOINTS_ENV in one_error_line(capsys, precision_check.PROG)


@pytest.mark.training
def test_precision_check_trains_both_and_compares(lib, tmp_path, monkeypatch, capsys):
    """Two real two-step ci runs, on a CPU that "auto" takes for a bfloat16 one."""
    fake_cpu(monkeypatch, bf16=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(runtime.CHECKPOINTS_ENV, str(tmp_path / "ckpt"))
    settings = {"steps": 2, "eval_every": 2, "n_eval": 16, "n_train": 200}
    argv = ["--preset", "ci"]
    for key, value in settings.items():
        argv += ["--set", f"{key}={value}"]
    assert precision_check.main(argv) == 0
    out = capsys.readouterr().out
    assert "comparing bf16 with fp32" in out
    for p in ("bf16", "fp32"):
        assert (tmp_path / "ckpt" / "ci" / f"precision-{p}" / "last.pt").is_file()
        results = json.loads(
            (tmp_path / "results" / f"ci-precision-{p}.json").read_text()
        )
        assert results["config"]["precision"] == p
    table = out[out.index("validation loss") :]
    assert "bf16" in table and "fp32" in table
    for split in lib.EVAL_SPLITS:
        assert f"bleu_{split}" in table


# -------------------------------------------------------------- load_check


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--", "no-such-command-here"], ["was not found", "check its name"]),
        (["--", "./README.md"], ["not executable", "chmod +x"]),
    ],
)
def test_load_check_refuses_a_command_it_cannot_start(monkeypatch, capsys, argv, words):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(load_check, "timed", must_not_run)
    monkeypatch.setattr(load_check, "start_load", must_not_run)
    assert run(load_check.main, load_check.PROG, argv) == 2
    line = one_error_line(capsys, load_check.PROG)
    for word in words:
        assert word in line


def test_load_check_caps_busy_at_the_cores(monkeypatch, capsys):
    monkeypatch.setattr(load_check, "start_load", must_not_run)
    cores = len(os.sched_getaffinity(0))
    assert run(load_check.main, load_check.PROG, ["--busy", "10000", "--", "true"]) == 2
    assert f"give at most {cores}" in one_error_line(capsys, load_check.PROG)


def test_load_check_ends_a_failing_command_in_one_error_line(capsys):
    argv = ["--only", "idle", "--", sys.executable, "-c", "raise SystemExit(3)"]
    assert run(load_check.main, load_check.PROG, argv) == 3
    line = one_error_line(capsys, load_check.PROG)
    assert "exit 3" in line and "round 1, idle" in line


def test_load_check_times_a_command(capsys):
    argv = ["--only", "idle", "--", sys.executable, "-c", "pass"]
    assert run(load_check.main, load_check.PROG, argv) == 0
    assert "idle: median" in capsys.readouterr().out


# ------------------------------------------------------------- thread_probe


class FakeKernel:
    """start_new_kernel's (manager, client), answering with `messages`."""

    def __init__(self, messages):
        self.messages = messages
        self.shut = False

    def __call__(self, **kwargs):
        return self, self

    def execute_interactive(self, code, output_hook, timeout):
        for msg in self.messages:
            output_hook(msg)

    def stop_channels(self):
        pass

    def shutdown_kernel(self):
        self.shut = True


def kernel_error(ename, evalue):
    content = {"ename": ename, "evalue": evalue, "traceback": ["kernel traceback"]}
    return {"msg_type": "error", "content": content}


@pytest.mark.parametrize(
    "ename, status, words",
    [
        ("ValueError", 1, ["probe_threads() failed in the kernel: ValueError: boom"]),
        ("DataUnavailableError", 2, ["probe_threads() in the kernel: boom"]),
    ],
)
def test_thread_probe_ends_a_kernel_error_in_one_error_line(
    monkeypatch, capsys, ename, status, words
):
    import jupyter_client.manager

    kernel = FakeKernel([kernel_error(ename, "boom")])
    monkeypatch.setattr(jupyter_client.manager, "start_new_kernel", kernel)
    monkeypatch.delenv(errors.TRACEBACK_ENV, raising=False)
    assert run(thread_probe.main, thread_probe.PROG, []) == status
    line = one_error_line(capsys, thread_probe.PROG)
    for word in words:
        assert word in line
    assert kernel.shut
    monkeypatch.setenv(errors.TRACEBACK_ENV, "1")
    run(thread_probe.main, thread_probe.PROG, [])
    assert "kernel traceback" in capsys.readouterr().err


def test_thread_probe_prints_the_kernels_output(monkeypatch, capsys):
    import jupyter_client.manager

    stream = {"msg_type": "stream", "content": {"name": "stdout", "text": "1.00 s"}}
    monkeypatch.setattr(
        jupyter_client.manager, "start_new_kernel", FakeKernel([stream])
    )
    assert run(thread_probe.main, thread_probe.PROG, ["--epoch"]) == 0
    assert "1.00 s" in capsys.readouterr().out


# ------------------------------------------------------- the parts the runs above skip


@pytest.mark.parametrize(
    "name, flops",
    [
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA GH200 480GB", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA L4", 121e12),
        ("Tesla T4", 65e12),
        ("NVIDIA A10G", None),  # not an A10
        ("AMD Instinct MI300X", None),
    ],
)
def test_bench_peak_flops_by_the_gpus_name(name, flops):
    assert bench.peak_flops(name) == flops


def test_bench_memory_child_prints_the_growth_of_the_peak(lib, capsys):
    assert bench.main([*TINY_BENCH, "--memory-child", "fast"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # one line of JSON: the growth of the peak over two steps (in this long-lived
    # process, not the fresh one the bench starts, it may even come out below 0)
    assert set(json.loads(last)) == {"peak_mib"}
    assert isinstance(json.loads(last)["peak_mib"], float)
    status = Path("/proc/self/status").read_text().splitlines()
    kib = next(int(s.split()[1]) for s in status if s.startswith("VmHWM:"))
    assert bench.rss_mib("VmHWM") == pytest.approx(kib / 1024, abs=64)
    with pytest.raises(KeyError):
        bench.rss_mib("NoSuchField")


def test_bench_reads_the_memory_childs_last_line(monkeypatch):
    """cpu_peak_mib runs the bench again in a fresh process (process tier): here
    the process is a stand-in, and the command and the reading are checked."""
    ran = []

    def run(cmd, capture_output, text, check, **popen):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, 'noise\n{"peak_mib": 12.5}\n', "")

    monkeypatch.setattr(bench.subprocess, "run", run)
    assert bench.cpu_peak_mib(["--preset", "ci"], "fast") == 12.5
    assert ran == [
        [
            sys.executable,
            "-m",
            "tools.bench",
            "--preset",
            "ci",
            "--memory-child",
            "fast",
        ]
    ]
    failed = subprocess.CompletedProcess([], 2, "", "Traceback\nerror: --vocab 0\n")
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(RuntimeError) as err:
        bench.cpu_peak_mib([], "didactic")
    assert str(err.value) == (
        "measuring the didactic path's memory in a fresh process failed (exit 2): "
        "error: --vocab 0"
    )


def test_bench_counts_flops_without_a_precision_in_a_null_context():
    """step_flops' stand-in for a precision's autocast: enters to nothing, lets an
    error through."""
    with bench._nothing() as entered:
        assert entered is None
    with pytest.raises(KeyError), bench._nothing():
        raise KeyError("through")


def test_precision_check_table_figures():
    assert precision_check.figure(None) == "-"
    assert precision_check.figure(38.456) == "38.46"
    assert precision_check.figure(1600) == "1600"
    assert precision_check.figure("bf16") == "bf16"


def test_load_check_starts_spinning_processes_at_nice_19_in_sessions_of_their_own():
    procs = load_check.start_load(2)
    try:
        assert len(procs) == 2
        for p in procs:
            argv = []
            for _ in range(250):  # until `nice` has started Python in its place
                argv = Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[:-1]
                if argv and argv[0] != b"nice":
                    break
                time.sleep(0.02)
            assert argv == [sys.executable.encode(), b"-c", load_check.SPIN.encode()]
            assert os.getpriority(os.PRIO_PROCESS, p.pid) == 19
            assert os.getsid(p.pid) == p.pid
    finally:
        load_check.stop_load(procs)
    assert [p.returncode for p in procs] == [-9, -9]


def test_run_tool_prints_the_output_and_raises_the_error(monkeypatch, capsys):
    """atkit.programs.run_tool: `python -m <module> args` with this interpreter, its
    arguments as strings; the output printed, a failure raised with its stderr."""
    import subprocess
    import sys
    from pathlib import Path

    from atkit import programs

    calls = []

    def fake(cmd, **kw):
        calls.append(cmd)
        code = 3 if "--bad" in cmd else 0
        return subprocess.CompletedProcess(cmd, code, "out\n", "the reason\n")

    monkeypatch.setattr(programs.subprocess, "run", fake)
    assert programs.run_tool("tools.x", "--n", 2, Path("a b")) is None
    assert calls[0] == [sys.executable, "-m", "tools.x", "--n", "2", "a b"]
    assert capsys.readouterr().out == "out\n"
    with pytest.raises(
        programs.ToolError, match=r"tools.x failed \(exit 3\): the reason"
    ):
        programs.run_tool("tools.x", "--bad")
