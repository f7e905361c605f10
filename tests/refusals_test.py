#!/usr/bin/env python3
"""The cases of the third hostile round (issue 58), one check each: what crashed, what printed
plausible but wrong numbers with exit 0, and what failed without naming its cause. Each run
must now train correctly or exit 1 with a line naming the program and the cause.

usage: refusals_test.py SAR_TRAIN SAR_PARTITION SAR_PLAN SAR_CONVERT SAR_SAMPLE SAR_PREDICT MPIRUN
(SAR_DATA_DIR names the data)
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

train, partition, plan, convert, sample, predict = (os.path.abspath(p) for p in sys.argv[1:7])
mpirun = sys.argv[7]
data = os.environ["SAR_DATA_DIR"]
cora, chameleon = os.path.join(data, "cora"), os.path.join(data, "chameleon")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
passed = failed = 0


def run(command, stdout=subprocess.PIPE, preexec_fn=None, timeout=120):
    p = subprocess.run(command, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True,
                       preexec_fn=preexec_fn, timeout=timeout)
    return p.returncode, (p.stdout or "") + p.stderr


def report(name, ok, output=""):
    global passed, failed
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if not ok:
        print("\n".join("     | " + line for line in output.splitlines()[-12:]))
    passed, failed = passed + ok, failed + (not ok)


def refused(name, command, *must_contain, **kw):
    """command exits 1, saying every string of must_contain, and nothing crashes."""
    code, output = run(command, **kw)
    ok = code == 1 and all(s in output for s in must_contain) and "Segmentation" not in output
    report(f"{name}: exit {code}", ok, output)


with tempfile.TemporaryDirectory(prefix="sar-refusals-") as tmp:
    # Crash: mpnn on a graph without edge features (one process, minibatches, 2 ranks, types
    # erased from a heterogeneous graph).
    store = os.path.join(tmp, "cora-2")
    subprocess.run([partition, "--dataset", cora, "--parts", "2", "--out", store], env=env,
                   check=True, capture_output=True)
    for name, command in (
            ("mpnn on Cora", [train, "--dataset", cora, "--model", "mpnn", "--epochs", "2"]),
            ("mpnn on planted, minibatches", [train, "--dataset", "planted:nodes=2000",
                                              "--model", "mpnn", "--minibatch", "64",
                                              "--no-edge-state", "--epochs", "1"]),
            ("mpnn on planted-hetero", [train, "--dataset", "planted-hetero:nodes=2000",
                                        "--model", "mpnn", "--epochs", "1"]),
            ("mpnn on a 2-rank store", [mpirun, "-np", "2", train, "--partitions", store,
                                        "--model", "mpnn", "--epochs", "1"])):
        refused(name, command, "--model mpnn", "edge features")

    # Plausible but wrong: sar-plan's sizes beyond what it plans, and a NaN edge cut.
    base = [plan, "--nodes", "1000", "--edges", "5000", "--features", "16", "--classes", "4"]
    for option, value in (("--hidden", "1e30"), ("--hidden", "1e20"), ("--nodes", "inf"),
                          ("--nodes", "1e300"), ("--edges", "1e300"), ("--features", "1e300"),
                          ("--edge-cut", "nan"), ("--feature-density", "nan")):
        command = [a for a in base]
        if option in command:
            command[command.index(option) + 1] = value
        else:
            command += [option, value]
        refused(f"sar-plan {option} {value}", command + ["--json"], "sar-plan", option)
    code, output = run(base + ["--hidden", "4096", "--json"])
    peak = json.loads(output[output.index("{"):])["peak_memory_bytes_per_rank"] if code == 0 else -1
    report(f"sar-plan --hidden 4096 plans a positive peak ({peak})", peak > 0, output)

    # Write errors on standard output end in failure, in every program (sar-train writes its
    # lines on stderr, through the log).
    with open("/dev/full", "w") as full:
        for name, command in (
                ("sar-plan --json", base + ["--json"]), ("sar-plan (table)", base),
                ("sar-partition", [partition, "--dataset", "planted:nodes=500", "--parts", "2",
                                   "--out", os.path.join(tmp, "full-store")]),
                ("sar-convert", [convert, "--dataset", "planted:nodes=500",
                                 "--out", os.path.join(tmp, "full.npy")]),
                ("sar-train --help", [train, "--help"]), ("sar-predict --version",
                                                          [predict, "--version"]),
                ("sar-sample --help", [sample, "--help"])):
            refused(f"{name} > /dev/full", command, "cannot write standard output", stdout=full)

    refused("sar-train --save-model ''", [train, "--dataset", "planted:nodes=500",
                                           "--save-model", ""], "--save-model")

    # One regression target of 3e38 among values near 1, on a training node.
    extreme = os.path.join(tmp, "chameleon-extreme")
    shutil.copytree(chameleon, extreme)
    with gzip.open(os.path.join(chameleon, "split", "random", "train.csv.gz"), "rt") as f:
        first_train = int(f.readline())
    target_file = os.path.join(extreme, "raw", "node-target.csv.gz")
    with gzip.open(target_file, "rt") as f:
        targets = f.read().splitlines()
    targets[first_train] = "3e38"
    with gzip.open(target_file, "wt") as f:
        f.write("\n".join(targets) + "\n")
    refused("a regression target of 3e38", [train, "--dataset", extreme, "--task", "regress",
                                             "--epochs", "5"], "standardising output 0",
            "extreme targets")

    # Ranks started with different settings are refused, naming the rank.
    refused("ranks given different --metrics-out",
            [mpirun, "-np", "1", train, "--partitions", store, "--metrics-out",
             os.path.join(tmp, "a.json"), ":", "-np", "1", train, "--partitions", store,
             "--metrics-out", os.path.join(tmp, "b.json")], "the command line of rank 1")

    refused("--relation-fanouts naming a relation twice",
            [train, "--dataset", "planted-hetero:nodes=2000", "--model", "rgcn", "--minibatch",
             "64", "--fanouts", "5,5", "--relation-fanouts", "writes=1,writes=5/writes=2"],
            "names relation 'writes' twice")

    # Obscure: a directory as the calibration; a small file size limit.
    refused("sar-plan --calibration DIR", base + ["--calibration", tmp], "--calibration", tmp,
            "a directory")
    small_limit = lambda: __import__("resource").setrlimit(  # noqa: E731
        __import__("resource").RLIMIT_FSIZE, (4 << 20, 4 << 20))
    for name, command in (("sar-train", [train, "--dataset", "planted:nodes=500"]),
                          ("sar-partition", [partition, "--dataset", "planted:nodes=500",
                                             "--parts", "2", "--out", os.path.join(tmp, "s")]),
                          ("sar-predict", [predict, "--model", "m", "--dataset", "planted",
                                           "--out", os.path.join(tmp, "p")])):
        refused(f"{name} under ulimit -f 4096", command, name, "ulimit -f", "4096 KiB",
                preexec_fn=small_limit)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
