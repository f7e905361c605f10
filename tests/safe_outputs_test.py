"""The programs' outputs survive failures and foreign directories survive the programs
(usage: safe_outputs_test.py SAR_PARTITION SAR_CONVERT SAR_TRAIN; SAR_DATA_DIR names the data).

1. A directory holding someone else's meta.json and part-* directories is refused by
   sar-partition, and by sar-convert, and left byte for byte as it was.
2. A store rewritten under a file-size limit (the process dies of SIGXFSZ midway) keeps its
   previous content; so does a .npy dataset whose rewrite is interrupted by SIGINT.
3. A re-run after either failure works without clean-up and leaves no partial directory.
4. --parts above the node count is refused before anything is written.
5. sar-train's --metrics-out file is replaced whole or not at all (a file-size limit kills it
   while it writes); the next run replaces it and leaves no partial file.
"""
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

partition_program, convert_program, train_program = sys.argv[1], sys.argv[2], sys.argv[3]
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
    assert "refusing to touch it" in r.stderr and foreign in r.stderr, r.stderr
    r = run(convert_program, "--dataset", cora, "--out", foreign, expect=1)
    assert "refusing to touch it" in r.stderr, r.stderr
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
print("safe outputs: ok")
