"""sar-sample on Cora (usage: sar_sample_test.py SAR_SAMPLE; SAR_DATA_DIR names the data).

Checks the documented layout against the graph itself (no numpy needed): per block, indptr
has destinations + 1 entries, every edge is an in-edge of the dataset's graph (or a kept
self-loop), node-wise blocks hold at most the fanout per destination, the destinations are
the first sources, LADIES blocks carry float64 scales; a directory that is not a sar-sample
output is refused and left intact; a rerun replaces an earlier output.
"""
import csv
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

program = sys.argv[1]
cora = os.path.join(os.environ["SAR_DATA_DIR"], "cora")


def load_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    header_len = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + header_len].decode()
    descr = header.split("'descr': '")[1].split("'")[0]
    count = (len(data) - 10 - header_len) // 8
    code = {"<i8": "q", "<f8": "d"}[descr]
    return descr, list(struct.unpack("<%d%s" % (count, code), data[10 + header_len:]))


def in_edges():
    edges = set()
    with gzip.open(os.path.join(cora, "raw", "edge.csv.gz"), "rt") as f:
        for row in csv.reader(f):
            u, v = int(row[0]), int(row[1])
            edges.add((u, v))  # OGB lists source, destination; sar symmetrises Cora
            edges.add((v, u))
    return edges


def run(*args, expect=0):
    result = subprocess.run([program, *args], capture_output=True, text=True)
    assert result.returncode == expect, (args, result.returncode, result.stdout, result.stderr)
    return result


def check(out, sampler, fanouts, loops):
    meta = json.load(open(os.path.join(out, "sample.json")))
    assert meta["format"] == "sar-sample" and meta["sampler"] == sampler, meta
    edges = in_edges()
    for entry in meta["minibatches"]:
        d = os.path.join(out, entry["directory"])
        sizes = entry["level_sizes"]
        for l, fanout in enumerate(fanouts):
            p = lambda name: os.path.join(d, "block-%d-%s.npy" % (l, name))
            _, indptr = load_npy(p("indptr"))
            _, indices = load_npy(p("indices"))
            _, destinations = load_npy(p("destination-ids"))
            _, sources = load_npy(p("source-ids"))
            assert len(destinations) == sizes[l + 1] and len(sources) == sizes[l]
            assert len(indptr) == len(destinations) + 1 and indptr[-1] == len(indices)
            assert sources[:len(destinations)] == destinations
            for r, v in enumerate(destinations):
                picked = indices[indptr[r]:indptr[r + 1]]
                if sampler == "sage":
                    assert len(picked) <= fanout, (l, v, len(picked))
                for c in picked:
                    u = sources[c]
                    assert (u, v) in edges or (loops and u == v), (l, u, v)
            if sampler == "ladies":
                descr, scales = load_npy(p("source-scales"))
                assert descr == "<f8" and len(scales) == len(sources)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "samples")
    run("--dataset", cora, "--minibatch", "32", "--fanouts", "5,3", "--minibatches", "0,2",
        "--out", out)
    check(out, "sage", [5, 3], False)
    run("--dataset", cora, "--sampler", "ladies", "--fanouts", "64,64", "--minibatches", "1",
        "--out", out)  # replaces the earlier output
    assert sorted(os.listdir(out)) == ["minibatch-000001", "sample.json"], os.listdir(out)
    check(out, "ladies", [64, 64], True)

    foreign = os.path.join(tmp, "foreign")
    os.mkdir(foreign)
    open(os.path.join(foreign, "notes.txt"), "w").write("mine")
    result = run("--dataset", cora, "--out", foreign, expect=1)
    assert "so it is refused" in result.stderr, result.stderr
    assert os.listdir(foreign) == ["notes.txt"]
    result = run("--dataset", cora, "--minibatches", "99", "--out", out, expect=1)
    assert "outside" in result.stderr, result.stderr
    assert sorted(os.listdir(tmp)) == ["foreign", "samples"], os.listdir(tmp)
print("sar-sample: layout, edges, fanouts, refusal and replacement as documented")
