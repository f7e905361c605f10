"""Out-of-core training through sar-train
(usage: out_of_core_test.py SAR_TRAIN SAR_PARTITION SAR_CONVERT [MPIRUN]).

1. --memory-budget on a planted graph, one process: the per-epoch training losses and the
   scores of the in-memory run (1e-5 relative) for gcn, sage and gat (three layers, dropout),
   within a budget the run's own log says it cut into several parts; --part-rows 7 the same;
   the spill directory holds nothing afterwards.
2. The same run on 2 ranks (--partition, each rank streaming its own parts): the same losses.
   A partition store of 4 METIS parts (sar-partition) trained out of core by one process
   (visiting the 4 parts, cut no further) and by 2 ranks (2 parts each): the same losses; a
   store whose parts the ranks cannot share equally is refused.
3. Refused, naming the cause: a budget too small to hold the graph (the message names the
   budget and what it must hold), --memory-budget without --spill-dir, --spill-dir without
   --memory-budget, --memory-budget with --minibatch or --batch-norm, a budget that is not a
   size.
4. kill -9 during a spill-heavy run that checkpoints every epoch: its spill directory stays
   behind, the next run in the same --spill-dir removes it (its journal proves sar wrote it),
   and the last checkpoint resumes.
5. A spill directory on a full file system (a 128 KiB tmpfs mounted in a mount namespace of
   the run's own; skipped where one cannot be made): refused at once, naming the directory and
   the bytes needed.
6. Minibatches on features read in place (--map-features: features.npy of a sar-convert
   dataset, memory-mapped): the very losses of the loaded features; refused without
   --minibatch, with --precision double and on a dataset that is not a .npy directory.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sar_train, sar_partition, sar_convert = sys.argv[1:4]
mpirun = sys.argv[4] if len(sys.argv) > 4 else None
planted = "planted:nodes=3000,classes=4,degree=10,features=16"
common = ("--dataset", planted, "--layers", "3", "--hidden", "16", "--epochs", "4",
          "--seed", "3", "--normalise-features", "off")


def run(command, expect=0):
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == expect, (command, result.returncode, result.stderr[-3000:])
    return result


def train(*options, launcher=()):
    with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
        result = run([*launcher, sar_train, *common, "--metrics-out", metrics.name, *options])
        return result, json.load(open(metrics.name))


def refused(*options):
    result = subprocess.run([sar_train, *common, *options], capture_output=True, text=True)
    assert result.returncode != 0, (options, result.stdout[-2000:])
    return result.stderr


def assert_same(one, two):
    """Per-epoch losses and the best epoch's scores of two runs within 1e-5 relative."""
    worst = max(abs(a - b) / abs(a) for a, b in zip(one["train_loss"], two["train_loss"]))
    assert worst <= 1e-5, (worst, one["train_loss"], two["train_loss"])
    for key in ("best_val_acc", "test_acc"):
        assert abs(one[key] - two[key]) <= 1e-5, (key, one[key], two[key])


def parts_of(log):
    """The parts on rank 0 that sar-train's log announces."""
    for line in log.splitlines():
        if "out of core within" in line:
            return int(line.split(": ", 1)[1].split(" parts")[0])
    raise AssertionError(log)


with tempfile.TemporaryDirectory() as tmp:
    spill = os.path.join(tmp, "spill")
    budget = ("--memory-budget", "20000K", "--spill-dir", spill)  # a few parts
    # 1. One process.
    for model in ("gcn", "sage", "gat"):
        _, in_memory = train("--model", model, "--quiet")
        result, out_of_core = train("--model", model, *budget)
        assert parts_of(result.stderr + result.stdout) > 1, result.stderr
        assert_same(in_memory, out_of_core)
        assert os.listdir(spill) == [], os.listdir(spill)
        if model == "gcn":
            _, single_rows = train("--model", model, "--quiet", *budget, "--part-rows", "7")
            assert_same(in_memory, single_rows)
            # 2. Two ranks, each streaming its parts.
            if mpirun:
                # (each rank's MPI buffers need more than `budget`: the parts are given)
                _, two = train("--model", model, "--quiet", "--memory-budget", "64M",
                               "--spill-dir", spill, "--part-rows", "300", "--partition",
                               "random", launcher=(mpirun, "-np", "2", "--oversubscribe"))
                assert_same(in_memory, two)
                assert os.listdir(spill) == [], os.listdir(spill)

    # 2b. A partition store of 4 METIS parts: one process visits all 4, 2 ranks 2 each.
    store = os.path.join(tmp, "store")
    run([sar_partition, "--dataset", planted, "--parts", "4", "--method", "metis",
         "--out", store])
    _, in_memory = train("--model", "gcn", "--quiet")
    options = [o for o in common if o not in ("--dataset", planted)]
    for launcher, parts in (((), 4), ((mpirun, "-np", "2", "--oversubscribe"), 2)):
        if launcher and not mpirun:
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
            result = run([*launcher, sar_train, *options, "--model", "gcn", "--partitions", store,
                          "--memory-budget", "256M", "--spill-dir", spill,
                          "--metrics-out", metrics.name])
            from_store = json.load(open(metrics.name))
        log = result.stderr + result.stdout
        assert f"cut at its {parts} parts of the partition store" in log, log
        assert parts_of(log) == parts, log  # each store part fits: none is cut further
        assert_same(in_memory, from_store)
        assert os.listdir(spill) == [], os.listdir(spill)
    if mpirun:
        uneven = subprocess.run([mpirun, "-np", "3", "--oversubscribe", sar_train,
                                 "--partitions", store, "--memory-budget", "256M",
                                 "--spill-dir", spill], capture_output=True, text=True)
        assert uneven.returncode != 0 and "cannot share equally" in uneven.stderr, uneven.stderr

    # 3. Refusals.
    error = refused("--memory-budget", "1M", "--spill-dir", spill)
    assert "--memory-budget" in error and "budget of 1048576 bytes" in error, error
    assert "graph" in error and "for a part of one node" in error, error
    for options, words in ((("--memory-budget", "24M"), "needs --spill-dir"),
                           (("--spill-dir", spill), "is an option of --memory-budget"),
                           ((*budget, "--minibatch", "64"), "does not take --minibatch"),
                           ((*budget, "--batch-norm"), "does not take --batch-norm"),
                           (("--memory-budget", "lots", "--spill-dir", spill),
                            "is not a size in bytes")):
        error = refused(*options)
        assert words in error, (options, error)

    # 4. kill -9 while spilling: the next run removes what it left.
    checkpoint = os.path.join(tmp, "checkpoint")
    big = ("--dataset", "planted:nodes=60000,classes=4,degree=10,features=64", "--layers", "3",
           "--hidden", "64", "--epochs", "1000", "--quiet", "--memory-budget", "64M",
           "--spill-dir", spill, "--checkpoint", checkpoint, "--checkpoint-every", "1")
    victim = subprocess.Popen([sar_train, *big], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.isdir(checkpoint):  # an epoch done
        time.sleep(0.05)
    time.sleep(0.3)  # into the next epoch
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    left = os.listdir(spill)
    assert left and all(d.startswith("sar-spill-") for d in left), left
    resumed = subprocess.run([sar_train, *big, "--epochs", "1", "--resume", checkpoint],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert os.listdir(spill) == [], os.listdir(spill)

    # 5. A full file system.
    small = os.path.join(tmp, "small")
    os.makedirs(small)
    mount = f"mount -t tmpfs -o size=128k tmpfs {small} && exec \"$@\""
    probe = subprocess.run(["unshare", "-m", "sh", "-c", mount, "sh", "true"],
                           capture_output=True, text=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        print("skipped the full file system: no mount namespace here")
    else:
        full = subprocess.run(["unshare", "-m", "sh", "-c", mount, "sh", sar_train, *common,
                               "--memory-budget", "20000K", "--spill-dir", small],
                              capture_output=True, text=True)
        assert full.returncode != 0, full.stdout[-2000:]
        assert "is full" in full.stderr and small in full.stderr, full.stderr
        assert "needed" in full.stderr and "bytes" in full.stderr, full.stderr
    # 6. Minibatches on memory-mapped features.
    npy = os.path.join(tmp, "planted.npy")
    run([sar_convert, "--dataset", planted, "--out", npy])
    minibatches = ("--dataset", npy, "--minibatch", "256", "--epochs", "3", "--seed", "3",
                   "--normalise-features", "off", "--quiet")
    losses = []
    for mapped in ((), ("--map-features",)):
        with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
            run([sar_train, *minibatches, *mapped, "--metrics-out", metrics.name])
            losses.append(json.load(open(metrics.name))["train_loss"])
    assert losses[0] == losses[1], losses
    for options, words in ((("--dataset", npy, "--map-features"), "it needs --minibatch"),
                           ((*minibatches, "--map-features", "--precision", "double"),
                            "--precision double"),
                           (("--minibatch", "64", "--map-features"), "planted is not one")):
        result = subprocess.run([sar_train, *options], capture_output=True, text=True)
        assert result.returncode != 0 and words in result.stderr, (options, result.stderr)
print("out-of-core programs: all checks passed")
