"""sar-plan through its interface (usage: plan_test.py SAR_PLAN SAR_PARTITION).

1. --json prints peak_memory_bytes_per_rank, halo_bytes_per_epoch and epoch_seconds (null
   without a calibration), and the memory terms sum to the peak.
2. With a list of ranks, the per-rank peak falls as P grows and the halo traffic appears once
   P > 1; one rank has no halo.
3. A partition store gives the sizes (its meta.json) and its measured cut.
4. --calibrate --calibration FILE writes positive rates; a plan with them has an epoch time,
   and a faster link gives a shorter one. With a graph and a model, --calibrate also times the
   model: a plan of that model scales its measured epoch (longer than the kernel rates'
   bound, and growing with the graph), a plan of another model falls back to the bound.
   With --ranks 1,2 --ranks-per-machine 2 it also times the model on each P's part, with 2
   copies at once for P = 2, and the exchange's copies: the file keeps one scale per P. A
   plan multiplies the small graphs' costs by the scale of its part's size (interpolated in
   log(nodes) between the sizes timed) and ranks per machine, and adds the halo bytes the rank
   sends at the measured costs (checked on a calibration file written by hand).
5. Clear errors: no sizes, a calibration file that is not one, an epoch scale without its
   fields.
6. Sparse features: bag-of-words features (--feature-density, or a store's or .npy dataset's
   sparse features) are planned as sparse rows, a fraction of the dense features' bytes.
7. --storage bf16 halves the features' bytes; GAT's decoded copy is the input dropout's, a GCN
   on one process keeps fewer activations.
"""
import json
import os
import subprocess
import sys
import tempfile

plan, partition = sys.argv[1:3]


def run(*args, expect=0):
    result = subprocess.run([plan, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == expect, (args, result.returncode, result.stderr[-2000:])
    return result


graph = ("--nodes", "200000", "--edges", "4000000", "--features", "128", "--classes", "8")
one = json.loads(run(*graph, "--model", "gcn", "--json").stdout)
for key in ("peak_memory_bytes_per_rank", "halo_bytes_per_epoch", "epoch_seconds"):
    assert key in one, one
assert one["epoch_seconds"] is None and one["halo_bytes_per_epoch"] == 0, one
assert abs(sum(one["memory_terms"].values()) - one["peak_memory_bytes_per_rank"]) < 1, one

# bf16 storage: the features at 2 bytes each. GAT decodes them into the input dropout's copy, so
# no other term changes; a GCN on one process reads them row by row (no decoded copy, no first-
# layer aggregate kept, a mask of bits): fewer activations.
for model in ("gcn", "gat"):
    fp32 = json.loads(run(*graph, "--model", model, "--json").stdout)
    bf16 = json.loads(run(*graph, "--model", model, "--storage", "bf16", "--json").stdout)
    assert fp32["storage"] == "fp32" and bf16["storage"] == "bf16", (fp32, bf16)
    terms, halved = fp32["memory_terms"], bf16["memory_terms"]
    assert halved["features"] == terms["features"] / 2 == 200000 * 128 * 2, (terms, halved)
    if model == "gat":
        assert halved["activations"] == terms["activations"], (terms, halved)
    else:
        assert halved["activations"] < terms["activations"], (terms, halved)
run(*graph, "--model", "gcn", "--storage", "fp16", expect=1)

plans = json.loads(run(*graph, "--model", "sage", "--ranks", "1,2,4,8", "--json").stdout)["plans"]
peaks = [p["peak_memory_bytes_per_rank"] for p in plans]
assert all(a > b for a, b in zip(peaks, peaks[1:])), peaks
assert plans[0]["halo_bytes_per_epoch"] == 0 and plans[1]["halo_bytes_per_epoch"] > 0, plans

words = ("--nodes", "200000", "--edges", "2000000", "--features", "5000", "--classes", "8")
dense = json.loads(run(*words, "--model", "gcn", "--json").stdout)
sparse = json.loads(run(*words, "--feature-density", "0.003", "--model", "gcn", "--json").stdout)
assert dense["feature_density"] == 1 and sparse["feature_density"] == 0.003, (dense, sparse)
assert sparse["memory_terms"]["features"] < 0.02 * dense["memory_terms"]["features"], sparse
assert sparse["peak_memory_bytes_per_rank"] < 0.2 * dense["peak_memory_bytes_per_rank"], sparse

with tempfile.TemporaryDirectory(prefix="sar-plan-") as tmp:
    words_store = os.path.join(tmp, "words")
    subprocess.run([partition, "--dataset", "planted:nodes=2000,features=500,density=0.01",
                    "--parts", "2", "--out", words_store], check=True, capture_output=True)
    planned = json.loads(run("--partitions", words_store, "--json").stdout)
    assert 0.005 < planned["feature_density"] <= 0.01, planned
    assert planned["memory_terms"]["features"] < 0.1 * 1000 * 500 * 4, planned

    store = os.path.join(tmp, "store")
    subprocess.run([partition, "--dataset", "planted:nodes=2000,features=8", "--parts", "2",
                    "--out", store], check=True, capture_output=True)
    meta = json.load(open(os.path.join(store, "meta.json")))
    from_store = json.loads(run("--partitions", store, "--json").stdout)
    assert from_store["ranks"] == 2, from_store
    assert abs(from_store["edge_cut_fraction"] - meta["quality"]["edge_cut_fraction"]) < 1e-12

    rates = os.path.join(tmp, "rates.json")
    run("--calibrate", "--calibration", rates)
    written = json.load(open(rates))
    assert written["spmm_seconds_per_value"] > 0 and written["gemm_seconds_per_flop"] > 0
    slow = json.loads(run(*graph, "--ranks", "4", "--calibration", rates, "--link-gbit", "0.1",
                          "--json").stdout)
    fast = json.loads(run(*graph, "--ranks", "4", "--calibration", rates, "--link-gbit", "10",
                          "--json").stdout)
    assert 0 < fast["epoch_seconds"] < slow["epoch_seconds"], (fast, slow)
    assert not fast["epoch_seconds_measured_model"], fast

    small = ("--nodes", "1000", "--edges", "5000", "--features", "16", "--classes", "4")
    model_rates = os.path.join(tmp, "model-rates.json")
    run(*small, "--model", "sage", "--hidden", "16", "--calibrate", "--calibration", model_rates)
    written = json.load(open(model_rates))
    assert written["epoch_seconds_per_node"] > 0 and written["model"]["model"] == "sage", written
    bound = json.loads(run(*small, "--model", "sage", "--hidden", "16", "--calibration", rates,
                           "--json").stdout)
    measured = json.loads(run(*small, "--model", "sage", "--hidden", "16", "--calibration",
                              model_rates, "--json").stdout)
    assert measured["epoch_seconds_measured_model"], measured
    assert measured["epoch_seconds"] > bound["epoch_seconds"], (measured, bound)
    bigger = json.loads(run("--nodes", "2000", "--edges", "10000", "--features", "16",
                            "--classes", "4", "--model", "sage", "--hidden", "16",
                            "--calibration", model_rates, "--json").stdout)
    assert bigger["epoch_seconds"] > measured["epoch_seconds"], (bigger, measured)
    other = json.loads(run(*small, "--model", "gcn", "--hidden", "16", "--calibration",
                           model_rates, "--json").stdout)
    assert not other["epoch_seconds_measured_model"], other

    # Scales: timed on each P's part (2 copies at once for P = 2), kept in the file.
    scaled_rates = os.path.join(tmp, "scaled-rates.json")
    run(*small, "--model", "sage", "--hidden", "16", "--ranks", "1,2", "--ranks-per-machine", "2",
        "--calibrate", "--calibration", scaled_rates)
    scales = json.load(open(scaled_rates))["epoch_scales"]
    assert [(s["nodes"], s["ranks_per_machine"]) for s in scales] == [(1000, 1), (500, 2)], scales
    assert all(s["factor"] > 0 for s in scales), scales
    assert scales[0]["feature_seconds_per_byte"] == 0 and scales[1]["feature_seconds_per_byte"] > 0
    assert scales[1]["gradient_seconds_per_byte"] > 0, scales

    # The arithmetic, on rates written by hand: 1e-6 s per node, 1e-8 per edge; scales of 1 at
    # 1000 nodes and 3 at 4000 (one rank per machine), 5 at 2000 nodes with 2 per machine and
    # 1e-9 s per halo byte.
    sizes = ("--nodes", "2000", "--edges", "20000", "--features", "16", "--classes", "4")
    model = ("--model", "sage", "--hidden", "16")
    base = json.load(open(model_rates))
    base.update(epoch_seconds_per_node=1e-6, epoch_seconds_per_edge=1e-8, epoch_scales=[
        {"nodes": 1000, "ranks_per_machine": 1, "factor": 1},
        {"nodes": 4000, "ranks_per_machine": 1, "factor": 3},
        {"nodes": 2000, "ranks_per_machine": 2, "factor": 5, "feature_seconds_per_byte": 1e-9,
         "gradient_seconds_per_byte": 1e-9}])
    hand = os.path.join(tmp, "hand-rates.json")
    json.dump(base, open(hand, "w"))
    unscaled = 2000 * 1e-6 + 20000 * 1e-8  # the part of P = 1: every node and edge
    alone = json.loads(run(*sizes, *model, "--calibration", hand, "--json").stdout)
    assert abs(alone["epoch_seconds"] / unscaled - 2) < 1e-9, alone  # log-midpoint of 1 and 3
    shared = json.loads(run(*sizes, *model, "--ranks", "2", "--ranks-per-machine", "2",
                            "--calibration", hand, "--json").stdout)
    assert shared["ranks_per_machine"] == 2, shared
    # 5 x the half of P = 1 (the scale at 2000 nodes holds below it), plus the halo's copies.
    copies = shared["halo_bytes_per_epoch"] / 2 * 1e-9
    assert copies > 0 and abs(shared["epoch_seconds"] - (5 * unscaled / 2 + copies)) < 1e-12, shared
    # A plan of 2 ranks, one per machine, takes the scales of 1 per machine (nearest count):
    # its 1000 nodes scale by 1, and no halo costs were measured there.
    apart = json.loads(run(*sizes, *model, "--ranks", "2", "--calibration", hand, "--json").stdout)
    assert abs(apart["epoch_seconds"] / (unscaled / 2) - 1) < 1e-9, apart
    base["epoch_scales"] = [{"nodes": 1000, "factor": 1}]
    json.dump(base, open(hand, "w"))
    r = run(*sizes, *model, "--calibration", hand, expect=1)
    assert "an epoch scale needs nodes, ranks_per_machine and factor" in r.stderr, r.stderr

    r = run("--model", "gcn", expect=1)
    assert "the graph needs nodes, edges, features and classes" in r.stderr, r.stderr
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write("{}")
    r = run(*graph, "--calibration", bad, expect=1)
    assert "is not a sar-plan calibration" in r.stderr, r.stderr
print("plan: ok")
