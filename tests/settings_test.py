#!/usr/bin/env python3
"""Every setting of every program, walked with garbage (usage: settings_test.py SAR_TRAIN
SAR_PARTITION SAR_CONVERT SAR_SAMPLE SAR_PREDICT SAR_PLAN SAR_SURROGATE [MPIRUN];
SAR_DATA_DIR names the data).

1. Options: each program's options are read from its --help (so a new option is covered
   without touching this file; a program with subcommands, sar-surrogate, from each
   subcommand's --help) and each is run with garbage values ('abc', '-5', '1e300',
   '', 'nan', '-1', '0', '100000000', ...) on a tiny input, in a fresh working directory,
   with a timeout. Every run must end by itself with exit code 0 or 1, never by a signal;
   on 1 its stderr has a line starting with the program's name and nothing of a crash
   ("terminate called", "Aborted", a backtrace). Parse errors exit 1 (not CLI11's 105...);
   --help and --version exit 0.
2. Environment variables: every SAR_* name a program holds as a C string (what it can pass
   to getenv), with the same garbage, on one process and under mpirun -np 2.
3. Sizes beyond the machine (--hidden, --heads, --layers, planted nodes, rmat scale and
   edges): exit 1 within seconds, naming the setting and the memory it would need, without
   allocating it (peak memory stays small).
4. Mostly empty ranges: a label of 100 among 0-6 is refused and accepted with
   --num-classes 101; an edge-list id of 1000000 among 2708 nodes is refused and accepted
   with --num-nodes; ids or labels beyond a stated count are errors naming file and line.
5. sar-partition refuses to write empty parts (--parts 2708 --method metis on Cora).
"""
import concurrent.futures
import gzip
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import time

train, partition, convert, sample, predict, plan, surrogate = (os.path.abspath(p)
                                                               for p in sys.argv[1:8])
mpirun = sys.argv[8] if len(sys.argv) > 8 else shutil.which("mpirun")
cora = os.path.join(os.environ["SAR_DATA_DIR"], "cora")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
for name in [n for n in env if n.startswith("SAR_") and n != "SAR_DATA_DIR"]:
    del env[name]  # the runs below set their own
TIMEOUT = 60
GARBAGE = ["abc", "-5", "1e300", "", "nan", "-1", "0", "100000000", "inf", "1.5",
           "99999999999999999999", "1,x", "-0.5"]
CRASH = re.compile(r"terminate called|Aborted|Segmentation fault|core dumped|what\(\):|"
                   r"backtrace|Backtrace|std::bad_alloc|\*\*\* Process received signal")
failures = []
runs = 0


def program_name(binary):
    return os.path.basename(binary)


def run(command, cwd, extra_env=None, timeout=TIMEOUT):
    """Runs command in a session of its own; returns (exit code, or None if it was killed at the
    timeout, with all its processes; stdout + stderr; stderr; seconds; its peak memory in KiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.time()
        process = subprocess.Popen(command, cwd=cwd, env=dict(env, **(extra_env or {})),
                                   stdout=out, stderr=err, start_new_session=True)
        code, peak = None, 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                code, peak = os.waitstatus_to_exitcode(status), usage.ru_maxrss
                break
            if time.time() - start > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                os.wait4(process.pid, 0)
                break
            time.sleep(0.01)
        process.returncode = code if code is not None else -signal.SIGKILL  # reaped above
        seconds = time.time() - start
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    return code, stdout + stderr, stderr, seconds, peak


exit_codes = {}


def check(what, name, code, output, stderr):
    """The rules of every run (see the top); records a failure."""
    global runs
    runs += 1
    exit_codes[code] = exit_codes.get(code, 0) + 1
    problem = None
    if code is None:
        problem = f"did not end within {TIMEOUT} s"
    elif code < 0:
        problem = f"killed by signal {-code}"
    elif code not in (0, 1):
        problem = f"exit code {code} (expected 0 or 1)"
    elif CRASH.search(output):
        problem = "crash output: " + CRASH.search(output).group(0)
    elif code == 1 and not any(line.startswith(name + ":") or (": " + name + ":") in line
                               for line in stderr.splitlines()):
        problem = f"exit 1 without a line starting with '{name}:' on stderr"
    if problem:
        failures.append(f"{what}: {problem}\n" +
                        "\n".join("     | " + l for l in output.splitlines()[-8:]))


def options_of(binary, subcommand=()):
    """[(option, takes_value)] from the program's (or its subcommand's) --help (CLI11's layout:
    '  --name TYPE...')."""
    code, out, _, _, _ = run([binary, *subcommand, "--help"], cwd=tempfile.gettempdir())
    assert code == 0, (binary, code, out)
    found = []
    for line in out.splitlines():
        m = re.match(r"\s+(?:-\w,)?(--[\w-]+)(\s+\S+)?", line)
        if m and m.group(1) not in ("--help", "--version"):
            value = m.group(2) is not None and re.match(r"\s+[A-Z]", m.group(2)) is not None
            found.append((m.group(1), value))
    assert len(found) >= 3, (binary, out)
    return found


def with_setting(base, option, value):
    """The base options without `option`, then option=value (None: the flag alone)."""
    args = []
    for k, v in base.items():
        if k != option:
            args += [k] if v is None else [k, v]
    return args + ([option] if value is None else [option + "=" + value])


def walk_options(binary, base, scratch, subcommand=(), long_runs=()):
    """Runs every option of binary (after `subcommand`) with every garbage value, two runs at a
    time; long_runs: (option, value) pairs skipped because they are valid requests for long
    work (a hundred million training steps, say)."""
    name = program_name(binary)
    jobs = []
    for option, takes_value in options_of(binary, subcommand):
        values = GARBAGE if takes_value else [None, "abc"]
        for value in values:
            if (option, value) not in long_runs:
                jobs.append((option, value))
    counter = iter(range(len(jobs)))

    def one(job):
        option, value = job
        cwd = os.path.join(scratch, f"{name}-{next(counter)}")
        os.makedirs(cwd)
        command = [binary, *subcommand] + with_setting(base, option, value)
        code, out, err, _, _ = run(command, cwd)
        shutil.rmtree(cwd, ignore_errors=True)
        return f"{' '.join([name, *subcommand])} {option}={value!r}", code, out, err

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for what, code, out, err in pool.map(one, jobs):
            check(what, name, code, out, err)
    return len(jobs)


def environment_names(binary):
    """Every SAR_* name the program holds as a C string: what it can pass to getenv."""
    with open(binary, "rb") as f:
        data = f.read()
    return sorted({m.decode() for m in re.findall(rb"(?<![\w$'])(SAR_[A-Z0-9_]+)\x00", data)})


def expect(what, command, cwd, code, contains, extra_env=None, within=None, max_kib=None):
    """A run that must exit with `code` and print every string of `contains` (within `within`
    seconds, its peak memory under `max_kib`, if given)."""
    got, out, err, seconds, peak = run(command, cwd, extra_env)
    problems = [f"exit {got}, expected {code}"] if got != code else []
    problems += [f"output lacks {c!r}" for c in contains if c not in out]
    if within is not None and seconds > within:
        problems.append(f"took {seconds:.1f} s (at most {within} s)")
    if max_kib is not None and peak > max_kib:
        problems.append(f"peak memory {peak} KiB (at most {max_kib}: nothing so large is "
                        "allocated)")
    if CRASH.search(out):
        problems.append("crash output")
    if problems:
        failures.append(f"{what}: {'; '.join(problems)}\n" +
                        "\n".join("     | " + l for l in out.splitlines()[-8:]))
    return out


with tempfile.TemporaryDirectory(prefix="sar-settings-") as tmp:
    tiny = "planted:nodes=300"
    # 0. --help and --version exit 0; a parse error exits 1 naming the program.
    for binary in (train, partition, convert, sample, predict, plan, surrogate):
        name = program_name(binary)
        for flag in ("--help", "--version"):
            expect(f"{name} {flag}", [binary, flag], tmp, 0, [])
        expect(f"{name} --no-such-option", [binary, "--no-such-option"], tmp, 1, [name + ":"])
    for binary in (train, partition, sample):  # CLI11 alone would wrap -5 to 2^64 - 5
        expect(f"{program_name(binary)} --seed -5", [binary, "--seed", "-5"], tmp, 1,
               ["--seed: '-5'"])

    # 1. Every option with garbage.
    store = os.path.join(tmp, "store-2")
    subprocess.run([partition, "--dataset", tiny, "--parts", "2", "--out", store], env=env,
                   check=True, capture_output=True)
    counts = {}
    counts["sar-train"] = walk_options(train, {"--dataset": tiny, "--epochs": "1",
                                               "--patience": "1", "--quiet": None}, tmp)
    counts["sar-partition"] = walk_options(partition, {"--dataset": tiny, "--parts": "2",
                                                       "--out": "out"}, tmp)
    counts["sar-convert"] = walk_options(convert, {"--dataset": tiny, "--out": "out"}, tmp)
    counts["sar-plan"] = walk_options(plan, {"--nodes": "1000", "--edges": "5000",
                                             "--features": "16", "--classes": "4"}, tmp)
    counts["sar-sample"] = walk_options(sample, {"--dataset": tiny, "--minibatch": "8",
                                                 "--out": "out"}, tmp)
    model = os.path.join(tmp, "tiny.sarmodel")
    subprocess.run([train, "--dataset", tiny, "--epochs", "2", "--quiet", "--save-model", model],
                   env=env, check=True, capture_output=True)
    counts["sar-predict"] = walk_options(predict, {"--model": model, "--dataset": tiny,
                                                   "--out": "out"}, tmp)
    small = {"--train": "1", "--valid": "0", "--test": "1", "--steps": "3",
             "--cells-across": "4"}
    counts["sar-surrogate generate"] = walk_options(surrogate, dict(small, **{"--out": "out"}),
                                                    tmp, ["generate"])
    waves = os.path.join(tmp, "waves")
    subprocess.run([surrogate, "generate", "--out", waves] + sum(map(list, small.items()), []),
                   env=env, check=True, capture_output=True)
    counts["sar-surrogate train"] = walk_options(
        surrogate, {"--dataset": waves, "--steps": "2", "--normaliser-steps": "1",
                    "--hidden": "8", "--layers": "2", "--log-every": "0"}, tmp, ["train"],
        long_runs={("--steps", "100000000"), ("--normaliser-steps", "100000000")})
    print("option runs:", counts)

    # 2. Environment variables with garbage: one process, and two ranks under mpirun.
    names = sorted(set(environment_names(train)) | {"SAR_WATCHDOG_SECONDS",
                                                    "SAR_TRAIN_INJECT_FAILURE"})
    print("environment variables:", names)
    for variable in names:
        for value in GARBAGE + ["1:2:3:4", "0:0:explode", ":"]:
            code, out, err, _, _ = run([train, "--dataset", tiny, "--epochs", "2", "--quiet"],
                                       tmp, {variable: value})
            check(f"sar-train {variable}={value!r}", "sar-train", code, out, err)
            if mpirun:
                code, out, err, _, _ = run([mpirun, "-np", "2", "--oversubscribe", train,
                                            "--partitions", store, "--epochs", "2", "--quiet"],
                                           tmp, {variable: value})
                check(f"mpirun -np 2 sar-train {variable}={value!r}", "sar-train", code, out, err)
    # The one that must be refused on every rank alike: a clear message and exit 1, no hang.
    if mpirun:
        expect("mpirun -np 2 with SAR_WATCHDOG_SECONDS=abc",
               [mpirun, "-np", "2", "--oversubscribe", train, "--partitions", store, "--quiet"],
               tmp, 1, ["sar-train: SAR_WATCHDOG_SECONDS='abc'"], {"SAR_WATCHDOG_SECONDS": "abc"},
               within=30)
    expect("--watchdog 1e300", [train, "--dataset", tiny, "--watchdog", "1e300"], tmp, 1,
           ["sar-train: --watchdog 1e+300"])

    # 3. Sizes beyond the machine: refused at once, naming the setting and the bytes.
    for what, command, words in (
            ("--hidden 1e11", [train, "--dataset", tiny, "--hidden", "100000000000"],
             ["--hidden 100000000000", "more than the", "of memory available"]),
            ("--heads 1e9", [train, "--dataset", tiny, "--model", "gat", "--heads", "1000000000"],
             ["--heads 1000000000", "of memory available"]),
            ("--layers 1e9", [train, "--dataset", tiny, "--layers", "1000000000"],
             ["--layers 1000000000", "of memory available"]),
            ("planted nodes=1e14", [train, "--dataset", "planted:nodes=1e14"],
             ["num_nodes = 100000000000000", "TiB", "of memory available"]),
            ("rmat scale=40", [convert, "--dataset", "rmat:scale=40", "--out", "out"],
             ["2^40 nodes (scale)", "of memory available"]),
            ("rmat edges=1e13", [partition, "--dataset", "rmat:scale=4,edges=1e13", "--parts",
                                 "2", "--out", "out"],
             ["10000000000000 edges", "of memory available"])):
        expect(what, command, tmp, 1, words, within=20, max_kib=1024 * 1024)

    # 4. Mostly empty class and node-id ranges.
    labelled = os.path.join(tmp, "cora-label-100")
    shutil.copytree(cora, labelled)
    with gzip.open(os.path.join(cora, "raw", "node-label.csv.gz"), "rt") as f:
        labels = f.read().splitlines()
    labels[56] = "100"  # line 57
    with gzip.open(os.path.join(labelled, "raw", "node-label.csv.gz"), "wt") as f:
        f.write("\n".join(labels) + "\n")
    for binary, extra in ((convert, ["--out", "npy", "--verify"]), (train, ["--epochs", "1"])):
        name = program_name(binary)
        expect(f"{name}: a label of 100 among 0-6", [binary, "--dataset", labelled, *extra], tmp,
               1, ["node-label.csv.gz", "largest label, 100 (line 57)", "--num-classes 101"])
        expect(f"{name}: ... accepted with --num-classes 101",
               [binary, "--dataset", labelled, "--num-classes", "101", *extra], tmp, 0, [])
        expect(f"{name}: ... beyond --num-classes 50",
               [binary, "--dataset", labelled, "--num-classes", "50", *extra], tmp, 1,
               ["node-label.csv.gz line 57", "label outside [-1, 50)"])
    expect("the .npy dataset declaring 101 classes", [convert, "--dataset", "npy", "--out", "npy2"],
           tmp, 1, ["meta.json declares num_classes = 101", "--num-classes 101"])

    edges = os.path.join(tmp, "cora-edges.txt")
    with gzip.open(os.path.join(cora, "raw", "edge.csv.gz"), "rt") as f:
        lines = [l.replace(",", " ") for l in f.read().splitlines()]
    with open(edges, "w") as f:
        f.write("\n".join(lines + ["5 1000000"]) + "\n")
    for binary, extra in ((convert, ["--out", "graph"]),
                          (partition, ["--parts", "2", "--out", "graph-store"])):
        name = program_name(binary)
        expect(f"{name}: an edge-list id of 1000000 among 2708 nodes",
               [binary, "--dataset", edges, *extra], tmp, 1,
               [f"line {len(lines) + 1}", "1000001 nodes", "--num-nodes 1000001"])
        expect(f"{name}: ... accepted with --num-nodes",
               [binary, "--dataset", edges, "--num-nodes", "1000001", *extra], tmp, 0, [])
        expect(f"{name}: ... beyond --num-nodes 2708", [binary, "--dataset", edges,
                                                       "--num-nodes", "2708", *extra], tmp, 1,
               [f"line {len(lines) + 1}", "node id outside [0, 2708)"])
    for name, binary in (("sar-train", train), ("sar-partition", partition),
                         ("sar-convert", convert), ("sar-sample", sample)):
        expect(f"{name} --help lists the size options", [binary, "--help"], tmp, 0,
               ["--num-nodes", "--num-classes"])
    for data in ("cora", "citeseer", "chameleon"):
        expect(f"{data} loads without options", [convert, "--dataset",
                                                 os.path.join(os.environ["SAR_DATA_DIR"], data),
                                                 "--out", data], tmp, 0, [])

    # 5. Empty parts are refused, with how many and what to do.
    out = expect("sar-partition --parts 2708 --method metis on Cora",
                 [partition, "--dataset", cora, "--parts", "2708", "--method", "metis", "--out",
                  "too-many"], tmp, 1, ["parts would be empty", "use fewer parts"])
    if os.path.exists(os.path.join(tmp, "too-many")):
        failures.append("--parts 2708 --method metis wrote a store")
    expect("sar-partition --parts 2000 --method random on Cora",
           [partition, "--dataset", cora, "--parts", "2000", "--method", "random", "--out",
            "too-many"], tmp, 1, ["parts would be empty", "use fewer parts"])

for f in failures:
    print("FAIL", f)
print(f"settings: {runs} walked runs (by exit code: {exit_codes}), {len(failures)} failures")
sys.exit(1 if failures else 0)
