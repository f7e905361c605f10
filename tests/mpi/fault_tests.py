#!/usr/bin/env python3
"""Fault tests: every failure on any rank must end ALL ranks promptly (within 10 s) with a
clear message and a non-zero exit code; nothing may hang.

usage: fault_tests.py SAR_TRAIN SAR_PARTITION   (run by meson test in the mpi suite)
"""
import os, shutil, subprocess, sys, tempfile, time

sar_train, sar_partition = sys.argv[1], sys.argv[2]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
LIMIT = 10.0
passed = failed = 0


def mpirun(n, *args):
    return ["mpirun", "-np", str(n), "--oversubscribe", sar_train, "--quiet", *args]


def expect_failure(name, command, must_contain, extra_env=None):
    """Runs command; it must exit non-zero within LIMIT seconds, printing must_contain."""
    global passed, failed
    start = time.time()
    try:
        run = subprocess.run(command, env=dict(env, **(extra_env or {})), capture_output=True,
                             text=True, timeout=60)
        elapsed, output, code = time.time() - start, run.stdout + run.stderr, run.returncode
    except subprocess.TimeoutExpired as e:
        elapsed, output, code = time.time() - start, str(e.stdout) + str(e.stderr), None
    ok = code not in (0, None) and elapsed < LIMIT and must_contain in output
    print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {code} after {elapsed:.1f} s")
    if not ok:
        print(f"     expected a non-zero exit within {LIMIT} s mentioning {must_contain!r}; output:\n"
              + "\n".join("     | " + line for line in output.splitlines()[-15:]))
    passed, failed = passed + ok, failed + (not ok)


def alive(pid):
    """Whether process pid exists and is not a zombie (dead, waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


with tempfile.TemporaryDirectory(prefix="sar-faults-") as tmp:
    store = os.path.join(tmp, "planted-2")
    subprocess.run([sar_partition, "--dataset", "planted:nodes=3000", "--parts", "2",
                    "--method", "metis", "--out", store], env=env, check=True,
                   capture_output=True)

    expect_failure("a rank that throws mid-epoch",
                   mpirun(2, "--partitions", store, "--epochs",
                          "200"),
                   "injected failure on rank 1 at epoch 3", {"SAR_TRAIN_INJECT_FAILURE": "3:1"})

    expect_failure("rank count does not match the store",
                   mpirun(3, "--partitions", store),
                   "has 2 parts but this run has 3 ranks")

    broken = os.path.join(tmp, "broken")
    shutil.copytree(store, broken)
    missing = os.path.join(broken, "part-0001", "in_columns.bin")
    os.remove(missing)
    expect_failure("a missing part file", mpirun(2, "--partitions", broken), "in_columns.bin")

    expect_failure("a non-finite loss", mpirun(2, "--partitions", store, "--lr", "1e30",
                                                "--epochs", "50"),
                   "non-finite")

    expect_failure("no partition store for several ranks", mpirun(2, "--dataset", "planted"),
                   "no --partitions")

    # The watchdog: a rank stopped with SIGSTOP, or busy outside MPI for ever, makes every
    # other rank end the job within the limit (2 s here) plus the census, naming it.
    store4 = os.path.join(tmp, "planted-4")
    subprocess.run([sar_partition, "--dataset", "planted:nodes=3000", "--parts", "4",
                    "--out", store4], env=env, check=True, capture_output=True)
    for ranks, parts, how, named in ((2, store, "stop", "no answer from rank(s) 1 (stopped"),
                                     (2, store, "hang", "outside MPI (computing or stuck): rank 1"),
                                     (4, store4, "stop", "no answer from rank(s) 1 (stopped")):
        expect_failure(f"a rank that stops ({how}) at epoch 3 of {ranks}",
                       mpirun(ranks, "--partitions", parts, "--epochs", "200", "--watchdog", "2"),
                       named, {"SAR_TRAIN_INJECT_FAILURE": f"3:1:{how}"})
        left = [pid for pid in subprocess.run(["pgrep", "-f", sar_train], capture_output=True,
                                              text=True).stdout.split()
                if alive(pid) and int(pid) != os.getpid()]
        print(f"{'ok  ' if not left else 'FAIL'} no sar-train process is left ({how}): {left}")
        passed, failed = passed + (not left), failed + bool(left)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
