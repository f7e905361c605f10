"""The programs' outputs survive failures and foreign directories survive the programs
(usage: safe_outputs_test.py SAR_PARTITION SAR_CONVERT SAR_TRAIN SAR_SAMPLE; SAR_DATA_DIR
names the data). The rule is docs/safe-outputs.md.

1. A directory holding someone else's meta.json and part-* directories is refused by
   sar-partition, and by sar-convert, and left byte for byte as it was.
2. A store rewritten under a file-size limit (the process dies of SIGXFSZ midway) keeps its
   previous content; so does a .npy dataset whose rewrite is interrupted by SIGINT.
3. A re-run after either failure works without clean-up and leaves no partial directory.
4. --parts above the node count is refused before anything is written.
5. sar-train's --metrics-out file is replaced whole or not at all (a file-size limit kills it
   while it writes); the next run replaces it and leaves no partial file.
6. Replacing never deletes what sar did not write: a user's file inside a part directory, a
   user's directory named like a part, a user's file named like a checkpoint array, a user's
   file inside a sar-sample minibatch directory, each makes the program refuse, naming it, and
   stays; siblings a user made with sar's temporary names survive a run.
7. Single output files that are not regular files: --metrics-out through a symbolic link
   writes its target (the link stays), /dev/null stays a device, a FIFO receives the JSON;
   --log-csv to a pipe receives every row once.
8. Edited metadata is named, not believed: an edited checkpoint.json is refused by --resume,
   a raised num_classes in a store's meta.json is refused by sar-train.
"""
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

partition_program, convert_program, train_program, sample_program = sys.argv[1:5]
cora = os.path.join(os.environ["SAR_DATA_DIR"], "cora")


def snapshot(directory):
    """{relative path: sha256} of every file under directory."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


def run(*command, expect=0, limit_bytes=None):
    def limit():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    result = subprocess.run(command, capture_output=True, text=True, preexec_fn=limit)
    if expect is not None:
        assert result.returncode == expect, (command, result.returncode, result.stderr)
    return result


def no_partials(parent):
    left = [name for name in os.listdir(parent) if ".sar-partial-" in name]
    assert not left, left


with tempfile.TemporaryDirectory() as tmp:
    # 1. A foreign directory that looks like a store.
    foreign = os.path.join(tmp, "foreign")
    os.makedirs(os.path.join(foreign, "part-0"))
    with open(os.path.join(foreign, "meta.json"), "w") as f:
        f.write('{"format": "my-simulation", "note": "not sar\'s"}\n')
    with open(os.path.join(foreign, "part-0", "state.bin"), "wb") as f:
        f.write(os.urandom(1000))
    before = snapshot(foreign)
    r = run(partition_program, "--dataset", cora, "--parts", "2", "--out", foreign, expect=1)
    assert "so it is refused" in r.stderr and foreign in r.stderr, r.stderr
    r = run(convert_program, "--dataset", cora, "--out", foreign, expect=1)
    assert "so it is refused" in r.stderr, r.stderr
    assert snapshot(foreign) == before

    # 2. A store rewritten under a file-size limit keeps its previous content.
    store = os.path.join(tmp, "store")
    run(partition_program, "--dataset", cora, "--parts", "2", "--out", store)
    before = snapshot(store)
    r = run(partition_program, "--dataset", cora, "--parts", "3", "--out", store,
            expect=None, limit_bytes=200000)
    assert r.returncode != 0, "the file-size limit did not stop sar-partition"
    assert snapshot(store) == before
    run(partition_program, "--dataset", cora, "--parts", "3", "--out", store)  # 3. re-run
    assert os.path.isdir(os.path.join(store, "part-0002")) and snapshot(store) != before
    no_partials(tmp)

    # ... and a .npy dataset interrupted by SIGINT while it is written.
    dataset = os.path.join(tmp, "dataset")
    run(convert_program, "--dataset", cora, "--out", dataset)
    before = snapshot(dataset)
    big = "planted:nodes=2000000,degree=20"
    process = subprocess.Popen([convert_program, "--dataset", big, "--out", dataset],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # interrupt once it writes
        if line.startswith("writing"):
            time.sleep(0.2)
            process.send_signal(signal.SIGINT)
            break
    process.wait()
    assert process.returncode != 0, "sar-convert finished before the interrupt"
    assert snapshot(dataset) == before
    run(convert_program, "--dataset", "planted:nodes=1000", "--out", dataset)  # 3. re-run
    assert snapshot(dataset) != before
    no_partials(tmp)

    # 4. More parts than nodes.
    r = run(partition_program, "--dataset", cora, "--parts", "3000", "--method", "contiguous",
            "--out", os.path.join(tmp, "many"), expect=1)
    assert "--parts 3000 exceeds the 2708 nodes" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(tmp, "many"))

    # 5. --metrics-out under a file-size limit (the JSON is several KiB).
    metrics = os.path.join(tmp, "metrics.json")
    with open(metrics, "w") as f:
        f.write('{"previous": true}\n')
    train = [train_program, "--dataset", "planted:nodes=300", "--epochs", "3", "--quiet",
             "--metrics-out", metrics]
    r = run(*train, expect=None, limit_bytes=1000)
    assert r.returncode != 0, "the file-size limit did not stop sar-train"
    with open(metrics) as f:
        assert f.read() == '{"previous": true}\n'
    run(*train)
    with open(metrics) as f:
        assert json.load(f)["epochs"] == 3
    no_partials(tmp)

    # 6. Replacing never deletes what sar did not write.
    store = os.path.join(tmp, "store6")
    run(partition_program, "--dataset", cora, "--parts", "2", "--out", store)
    for name, make in [("part-0001/notes.txt", "file"), ("part-mine", "dir")]:
        path = os.path.join(store, name)
        if make == "file":
            with open(path, "w") as f:
                f.write("mine\n")
        else:
            os.makedirs(os.path.join(path, "data"))
        before = snapshot(store)
        r = run(partition_program, "--dataset", cora, "--parts", "3", "--out", store, expect=1)
        assert name in r.stderr and "sar did not write" in r.stderr, r.stderr
        assert snapshot(store) == before and os.path.exists(path)
        os.remove(path) if make == "file" else shutil.rmtree(path)
    # ... a user's file named like a checkpoint array, beside a checkpoint.
    checkpoint = os.path.join(tmp, "ck")
    train = [train_program, "--dataset", "planted:nodes=300", "--epochs", "2", "--quiet"]
    run(*train, "--checkpoint", checkpoint)
    mine = os.path.join(checkpoint, "optimiser-notes.npy")
    with open(mine, "w") as f:
        f.write("mine\n")
    r = run(*train, "--checkpoint", checkpoint, expect=1)
    assert "optimiser-notes.npy" in r.stderr, r.stderr
    assert open(mine).read() == "mine\n"
    os.remove(mine)
    # ... a user's file inside a sar-sample minibatch directory.
    samples = os.path.join(tmp, "samples")
    sample = [sample_program, "--dataset", cora, "--minibatch", "16", "--minibatches", "0",
              "--out", samples]
    run(*sample)
    mine = os.path.join(samples, "minibatch-000000", "notes.txt")
    with open(mine, "w") as f:
        f.write("mine\n")
    r = run(*sample, expect=1)
    assert "minibatch-000000/notes.txt" in r.stderr, r.stderr
    assert open(mine).read() == "mine\n"
    # ... siblings with sar's temporary names that a user made (old and new forms, a process
    # that is gone) survive a run.
    users = [store + ".sar-partial-2147483646", store + ".sar-previous-2147483646",
             store + ".sar-partial-" + socket.gethostname() + "-2147483646-0123456789abcdef"]
    for d in users:
        os.makedirs(d)
        with open(os.path.join(d, "mine.txt"), "w") as f:
            f.write("mine\n")
    run(partition_program, "--dataset", cora, "--parts", "3", "--out", store)
    for d in users:
        assert open(os.path.join(d, "mine.txt")).read() == "mine\n", d

    # 7. Single output files that are not regular files.
    target = os.path.join(tmp, "real-metrics.json")
    link = os.path.join(tmp, "metrics-link.json")
    os.symlink(target, link)
    run(*train, "--metrics-out", link)
    assert os.path.islink(link) and json.load(open(target))["epochs"] == 2
    run(*train, "--metrics-out", "/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo).read()))
    reader.start()
    run(*train, "--metrics-out", fifo)
    reader.join(60)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and json.loads(received[0])["epochs"] == 2
    r = run(*train, "--log-csv", "/dev/stdout")  # a pipe here: rows written in place, once
    rows = [line for line in r.stdout.splitlines() if line[:1].isdigit() and "," in line]
    assert [row.split(",")[0] for row in rows] == ["0", "1"], r.stdout
    r = run(*train, "--metrics-out", tmp, expect=1)  # a directory: refused before training
    assert "is a directory" in r.stderr, r.stderr

    # 8. Edited metadata is named, not believed.
    meta_file = os.path.join(checkpoint, "checkpoint.json")
    with open(meta_file) as f:
        meta = json.load(f)
    meta["optimiser"]["steps"] += 100
    with open(meta_file, "w") as f:
        json.dump(meta, f)
    r = run(*train[:-1], "--epochs", "4", "--quiet", "--resume", checkpoint, expect=1)
    assert "checkpoint.json was changed after sar wrote it" in r.stderr, r.stderr
    meta_file = os.path.join(store, "meta.json")
    with open(meta_file) as f:
        meta = json.load(f)
    meta["num_classes"] += 3
    with open(meta_file, "w") as f:
        json.dump(meta, f)
    r = run(train_program, "--partitions", store, "--epochs", "1", expect=1)
    assert "meta.json was changed after sar wrote it" in r.stderr, r.stderr
print("safe outputs: ok")
