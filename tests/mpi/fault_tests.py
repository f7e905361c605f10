#!/usr/bin/env python3
"""Fault tests: every failure on any rank must end ALL ranks promptly (within 10 s) with a
clear message and a non-zero exit code; nothing may hang. Also when mpirun itself is stopped
(SIGSTOP) while the ranks wait in MPI: MPI_Abort then cannot end them, and the watchdog's last
resort must (each rank exits by itself a few seconds after asking MPI to abort).

usage: fault_tests.py SAR_TRAIN SAR_PARTITION   (run by meson test in the mpi suite)
"""
import os, re, shutil, signal, subprocess, sys, tempfile, time

sar_train, sar_partition = sys.argv[1], sys.argv[2]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
LIMIT = 10.0
passed = failed = 0


def mpirun(n, *args):
    return ["mpirun", "-np", str(n), "--oversubscribe", sar_train, "--quiet", *args]


def expect_failure(name, command, must_contain, extra_env=None):
    """Runs command in a session of its own; it must exit non-zero within LIMIT seconds,
    printing must_contain. Returns the session's id (mpirun gives each rank its own process
    group, not its own session)."""
    global passed, failed
    start = time.time()
    process = subprocess.Popen(command, env=dict(env, **(extra_env or {})),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=60)
        elapsed, output, code = time.time() - start, stdout + stderr, process.returncode
    except subprocess.TimeoutExpired:
        subprocess.run(["pkill", "-KILL", "-s", str(process.pid)], capture_output=True)
        stdout, stderr = process.communicate()
        elapsed, output, code = time.time() - start, stdout + stderr, None
    ok = code not in (0, None) and elapsed < LIMIT and must_contain in output
    print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {code} after {elapsed:.1f} s")
    if not ok:
        print(f"     expected a non-zero exit within {LIMIT} s mentioning {must_contain!r}; output:\n"
              + "\n".join("     | " + line for line in output.splitlines()[-15:]))
    passed, failed = passed + ok, failed + (not ok)
    return process.pid


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
                   "neither --partitions nor --partition")

    # The watchdog: a rank stopped with SIGSTOP, or busy outside MPI for ever, makes every
    # other rank end the job within the limit (2 s here) plus the census, naming it.
    store4 = os.path.join(tmp, "planted-4")
    subprocess.run([sar_partition, "--dataset", "planted:nodes=3000", "--parts", "4",
                    "--out", store4], env=env, check=True, capture_output=True)
    for ranks, parts, how, named in ((2, store, "stop", "no answer from rank(s) 1 (stopped"),
                                     (2, store, "hang", "outside MPI (computing or stuck): rank 1"),
                                     (4, store4, "stop", "no answer from rank(s) 1 (stopped")):
        session = expect_failure(
            f"a rank that stops ({how}) at epoch 3 of {ranks}",
            mpirun(ranks, "--partitions", parts, "--epochs", "200", "--watchdog", "2"), named,
            {"SAR_TRAIN_INJECT_FAILURE": f"3:1:{how}"})
        # This run's processes only (others may run sar-train meanwhile).
        left = [pid for pid in subprocess.run(["pgrep", "-s", str(session)], capture_output=True,
                                              text=True).stdout.split() if alive(pid)]
        print(f"{'ok  ' if not left else 'FAIL'} no sar-train process is left ({how}): {left}")
        passed, failed = passed + (not left), failed + bool(left)

    # The watchdog's last resort: with mpirun itself stopped (SIGSTOP), MPI_Abort cannot end
    # anything. From epoch 3, rank 1 waits in MPI for a message nobody sends (wait: every rank
    # waits in MPI, so every watchdog fires after 2 s) or sleeps outside MPI (hang: only rank
    # 0's watchdog fires; rank 1 learns of the abort from rank 0's announcement). Each rank
    # must end itself within the watchdog's limit + 10 s, printing why.
    for how in ("wait", "hang"):
        command = [a for a in mpirun(2, "--partitions", store, "--epochs", "200", "--watchdog",
                                     "2", "--log-every", "1")
                   if a != "--quiet"]  # every epoch's line: training is under way
        launcher = subprocess.Popen(command,
                                    env=dict(env, SAR_TRAIN_INJECT_FAILURE=f"3:1:{how}"),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ranks, seen = [], ""
        deadline = time.time() + 30
        for line in launcher.stderr:  # rank 0's progress lines, through mpirun
            seen += line
            if re.search(r"\bepoch\s+2\b", line) or time.time() > deadline:
                break
        ranks = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True,
                               text=True).stdout.split()
        launcher.send_signal(signal.SIGSTOP)
        start = time.time()
        while any(alive(pid) for pid in ranks) and time.time() - start < 20:
            time.sleep(0.1)
        elapsed = time.time() - start
        left = [pid for pid in ranks if alive(pid)]
        launcher.send_signal(signal.SIGCONT)
        try:
            _, rest = launcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            launcher.kill()
            _, rest = launcher.communicate()
        output = seen + rest
        for pid in left:  # never leave a process behind, even when failing
            subprocess.run(["kill", "-9", pid])
        ok = (len(ranks) == 2 and not left and elapsed < 2 + 10 and
              output.count("MPI_Abort has not ended rank") == 2 and "sar watchdog: rank" in output)
        print(f"{'ok  ' if ok else 'FAIL'} with mpirun stopped ({how}), every rank ends by itself: "
              f"{len(ranks)} ranks, {len(left)} left after {elapsed:.1f} s")
        if not ok:
            print("\n".join("     | " + line for line in output.splitlines()[-15:]))
        passed, failed = passed + ok, failed + (not ok)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
