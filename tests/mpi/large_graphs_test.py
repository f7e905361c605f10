#!/usr/bin/env python3
"""The distributed input path of the programs (issue: no rank ever holds the whole graph).

- mpirun -np P sar-partition --method random|contiguous writes, byte for byte, the store the
  one-process sar-partition writes, for K = P and K = 2P parts, from a .npy dataset, an OGB raw
  directory, an edge list, a .npy dataset with sparse features (Cora's stores: sparse
  features, format 7; the sparse rows move to their parts' ranks as they are) and OGB raw
  directories, homogeneous and heterogeneous, whose edges carry features (edge-feat, with
  repeated edges: each entry keeps the row the one-process reader gives it).
- Sparse features: GCN and GraphSAGE trained on 2 ranks from a store with sparse features give
  the losses of the same store written and trained dense, to 1e-5.
- mpirun -np P sar-partition --method ptscotch writes a valid store (sar-train trains on it),
  also coarsened (--cluster-size, --arc-fraction).
- Exactness: GCN trained from the PT-Scotch store on 2 and 4 ranks, and with --partition
  ptscotch (no store, also coarsened) on 2 ranks, gives the per-epoch losses of one process,
  to 1e-5.
- Features stored as bf16 (--storage bf16): one process's losses within 1e-2 of fp32's, and
  on 2 (no store) and 4 ranks (the store) those of one process to 1e-5, on minibatches too
  (2 ranks); an fp32 run refuses its checkpoint.
- A rank killed by SIGKILL or stopped by a file-size limit mid-write leaves the previous store
  intact; --method metis under mpirun and a store path over a user's directory are refused.

usage: large_graphs_test.py SAR_TRAIN SAR_PARTITION SAR_CONVERT   (run by meson test)
"""
import filecmp, json, os, subprocess, sys, tempfile, time

sar_train, sar_partition, sar_convert = sys.argv[1], sys.argv[2], sys.argv[3]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
data_dir = os.environ.get("SAR_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", "..",
                                                          "..", "shared", "data"))
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)
    return ok


def mpirun(ranks, *cmd):
    return ["mpirun", "-np", str(ranks), "--oversubscribe", *cmd]


def attempt(cmd, **kwargs):
    """Runs cmd; a hang ends the test naming the command (meson's own timeout would not)."""
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, **kwargs)
    except subprocess.TimeoutExpired:
        sys.exit(f"command hung for 180 s: {' '.join(cmd)}")


def run(cmd, **kwargs):
    result = attempt(cmd, **kwargs)
    if result.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{result.stdout}{result.stderr}")
    return result


def same_tree(a, b):
    listing = lambda d: sorted(os.path.relpath(os.path.join(r, f), d)
                               for r, _, fs in os.walk(d) for f in fs)
    return listing(a) == listing(b) and all(
        filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in listing(a))


def losses(metrics_file):
    with open(metrics_file) as f:
        return json.load(f)["train_loss"]


def write_lines(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(f"{line}\n" for line in lines)


def write_ogb_edge_features(tmp):
    """An OGB raw directory whose edges carry two features each (edge-feat), with repeated
    edges and a self-loop: the readers must give every entry the same edge's row."""
    root, n = os.path.join(tmp, "ogb-edge-feat"), 1500
    edges = [e for i in range(n) for e in (f"{i},{(i * 7 + 3) % n}", f"{i},{(i + 1) % n}")]
    edges += [f"{i},{(i + 1) % n}" for i in range(0, n, 9)] + ["5,5"]
    write_lines(os.path.join(root, "raw", "num-node-list.csv"), [n])
    write_lines(os.path.join(root, "raw", "edge.csv"), edges)
    write_lines(os.path.join(root, "raw", "edge-feat.csv"),
                [f"{k},{(k % 13) * 0.5}" for k in range(len(edges))])
    write_lines(os.path.join(root, "raw", "node-feat.csv"),
                [f"{i % 5},{(i * 3) % 7},{i * 0.001}" for i in range(n)])
    write_lines(os.path.join(root, "raw", "node-label.csv"), [i % 4 for i in range(n)])
    return root


def write_ogb_hetero_edge_features(tmp):
    """ogbn-mag's layout: papers (features, labels) and featureless authors, two relations
    whose edges carry features, one edge repeated."""
    root, papers, authors = os.path.join(tmp, "ogb-hetero-edge-feat"), 900, 300
    raw = os.path.join(root, "raw")
    write_lines(os.path.join(raw, "num-node-dict.csv"), ["paper,author", f"{papers},{authors}"])
    relations = {
        "author___writes___paper":
            [f"{a},{(a * 3 + j * 7) % papers}" for a in range(authors) for j in range(3)] + ["0,0"],
        "paper___cites___paper": [f"{p},{(p * 11 + 1) % papers}" for p in range(papers)]}
    for r, (name, edges) in enumerate(relations.items()):
        write_lines(os.path.join(raw, "relations", name, "edge.csv"), edges)
        write_lines(os.path.join(raw, "relations", name, "edge-feat.csv"),
                    [f"{r},{k * 0.25}" for k in range(len(edges))])
    write_lines(os.path.join(raw, "node-feat", "paper", "node-feat.csv"),
                [f"{p % 3},{p % 5},{p % 7},{p * 0.01}" for p in range(papers)])
    write_lines(os.path.join(raw, "node-label", "paper", "node-label.csv"),
                [p % 3 for p in range(papers)])
    return root


with tempfile.TemporaryDirectory(prefix="sar-large-graphs-") as tmp:
    npy = os.path.join(tmp, "planted.npy")
    run([sar_convert, "--dataset", "planted:nodes=3000,degree=8", "--out", npy])
    edges = os.path.join(tmp, "edges.txt")
    with open(edges, "w") as f:
        for i in range(2000):
            f.write(f"{i} {(i * 7 + 3) % 2000}\n{i} {(i + 1) % 2000}\n")
    inputs = {"npy": npy, "edge list": edges,
              "OGB raw with edge features": write_ogb_edge_features(tmp),
              "heterogeneous OGB raw with edge features": write_ogb_hetero_edge_features(tmp)}
    cora = os.path.join(data_dir, "cora")
    if os.path.isdir(cora):
        inputs["OGB raw (Cora)"] = cora
        cora_npy = os.path.join(tmp, "cora.npy")
        run([sar_convert, "--dataset", cora, "--out", cora_npy])
        check(os.path.exists(os.path.join(cora_npy, "features_indptr.npy")),
              "sar-convert writes Cora's features sparse")
        inputs["sparse .npy (Cora)"] = cora_npy

    # random and contiguous: the one-process store, byte for byte.
    for name, spec in inputs.items():
        for method in ("random", "contiguous"):
            for ranks, parts in ((2, 2), (3, 6)):
                serial = os.path.join(tmp, f"serial-{method}-{parts}")
                distributed = os.path.join(tmp, f"dist-{method}-{ranks}-{parts}")
                run([sar_partition, "--dataset", spec, "--parts", str(parts), "--method", method,
                     "--seed", "5", "--out", serial])
                run(mpirun(ranks, sar_partition, "--dataset", spec, "--parts", str(parts),
                           "--method", method, "--seed", "5", "--out", distributed))
                check(same_tree(serial, distributed),
                      f"{name}, {method}, {parts} parts on {ranks} ranks: the one-process store, "
                      "byte for byte")

    # Sparse features (Cora: 1.3% non-zero): stored sparse by default, read and trained on
    # sparse rows; the losses of the dense store.
    if "OGB raw (Cora)" in inputs:
        stores = {}
        for setting in ("auto", "off"):
            stores[setting] = os.path.join(tmp, f"cora-{setting}")
            run([sar_partition, "--dataset", cora, "--parts", "2", "--method", "metis",
                 "--sparse-features", setting, "--out", stores[setting]])
        with open(os.path.join(stores["auto"], "meta.json")) as f:
            check(json.load(f)["sparse_features"], "Cora's store holds sparse features")
        check(os.path.exists(os.path.join(stores["off"], "part-0000", "features.bin")),
              "--sparse-features off writes dense features")
        for model in ("gcn", "sage"):
            trained = {}
            for setting, store in stores.items():
                trained[setting] = os.path.join(tmp, f"cora-{model}-{setting}.json")
                run(mpirun(2, sar_train, "--partitions", store, "--model", model, "--epochs", "8",
                           "--seed", "2", "--sparse-features", setting,
                           "--metrics-out", trained[setting]))
            with open(trained["auto"]) as f:
                on_sparse = json.load(f)["sparse_features"]
            worst = max(abs(a - b) for a, b in zip(losses(trained["auto"]), losses(trained["off"])))
            check(on_sparse and len(losses(trained["auto"])) == 8 and worst <= 1e-5,
                  f"{model} on 2 ranks from the sparse store: sparse rows, losses within "
                  f"{worst:.1e} of the dense store's")

    # PT-Scotch: stores on 2 and 4 ranks; training on them and without a store is exact.
    common = ["--model", "gcn", "--epochs", "12", "--seed", "3", "--dropout", "0.5"]
    reference = os.path.join(tmp, "one.json")
    run([sar_train, "--dataset", npy, *common, "--metrics-out", reference])
    for ranks in (2, 4):
        store = os.path.join(tmp, f"ptscotch-{ranks}")
        out = run(mpirun(ranks, sar_partition, "--dataset", npy, "--parts", str(ranks),
                         "--method", "ptscotch", "--out", store)).stdout
        check("edge cut" in out and "peak memory" in out,
              f"PT-Scotch on {ranks} ranks reports the cut and the peak memory")
        metrics = os.path.join(tmp, f"store-{ranks}.json")
        run(mpirun(ranks, sar_train, "--partitions", store, *common, "--metrics-out", metrics))
        worst = max(abs(a - b) for a, b in zip(losses(metrics), losses(reference)))
        check(len(losses(metrics)) == 12 and worst <= 1e-5,
              f"GCN on the {ranks}-rank PT-Scotch store: losses within {worst:.1e} of one process")
    # Coarsened PT-Scotch (star clusters, half the arcs, refined): its meta.json says so, and
    # training on its store is exact too.
    store = os.path.join(tmp, "coarsened-4")
    out = run(mpirun(4, sar_partition, "--dataset", npy, "--parts", "4", "--method", "ptscotch",
                     "--cluster-size", "16", "--arc-fraction", "0.5", "--out", store)).stdout
    with open(os.path.join(store, "meta.json")) as f:
        described = json.load(f)["method"]
    check("cluster_size=16 arc_fraction=0.5" in described and "edge cut" in out,
          f"coarsened PT-Scotch writes a store described as '{described}'")
    metrics = os.path.join(tmp, "coarsened-4.json")
    run(mpirun(4, sar_train, "--partitions", store, *common, "--metrics-out", metrics))
    worst = max(abs(a - b) for a, b in zip(losses(metrics), losses(reference)))
    check(len(losses(metrics)) == 12 and worst <= 1e-5,
          f"GCN on the coarsened PT-Scotch store: losses within {worst:.1e} of one process")
    bad = attempt([sar_partition, "--dataset", npy, "--parts", "2", "--cluster-size", "16",
                   "--out", os.path.join(tmp, "m")])
    check(bad.returncode != 0 and "--method ptscotch only, not metis" in bad.stderr,
          "--cluster-size with --method metis is refused")
    for coarsened in ([], ["--cluster-size", "16", "--arc-fraction", "0.5"]):
        metrics = os.path.join(tmp, "no-store.json")
        run(mpirun(2, sar_train, "--dataset", npy, "--partition", "ptscotch", *coarsened, *common,
                   "--metrics-out", metrics))
        worst = max(abs(a - b) for a, b in zip(losses(metrics), losses(reference)))
        how = " ".join(["--partition ptscotch", *coarsened])
        check(worst <= 1e-5, f"GCN with {how} on 2 ranks (no store): losses within "
              f"{worst:.1e} of one process")
    bad = attempt(mpirun(2, sar_train, "--dataset", npy, "--partition", "random",
                         "--cluster-size", "16", *common))
    check(bad.returncode == 1 and "apply to --partition ptscotch only" in bad.stderr,
          "sar-train --cluster-size with --partition random is refused")

    # Features stored as bf16: exact across rank counts as fp32 is (to the order of sums), near
    # the fp32 run, and refused where it does not apply.
    bf16 = [*common, "--storage", "bf16"]
    one_bf16 = os.path.join(tmp, "one-bf16.json")
    run([sar_train, "--dataset", npy, *bf16, "--metrics-out", one_bf16])
    with open(one_bf16) as f:
        check(json.load(f)["storage"] == "bf16", "--storage bf16 is recorded in the metrics")
    near = max(abs(a - b) / abs(b) for a, b in zip(losses(one_bf16), losses(reference)))
    check(0 < near <= 1e-2, f"bf16 storage: losses within {near:.1e} (relative) of fp32's, not "
          "equal")
    for ranks, source in ((2, ["--dataset", npy, "--partition", "ptscotch"]),
                          (4, ["--partitions", os.path.join(tmp, "ptscotch-4")])):
        metrics = os.path.join(tmp, f"bf16-{ranks}.json")
        run(mpirun(ranks, sar_train, *source, *bf16, "--metrics-out", metrics))
        worst = max(abs(a - b) for a, b in zip(losses(metrics), losses(one_bf16)))
        check(len(losses(metrics)) == 12 and worst <= 1e-5,
              f"bf16 storage on {ranks} ranks: losses within {worst:.1e} of one process's")
    # On minibatches the gathered rows travel as bf16: 2 ranks train as one process does.
    sampled = ["--model", "sage", "--epochs", "3", "--seed", "3", "--minibatch", "256",
               "--fanouts", "5,5"]
    one_sampled, one_sampled_bf16 = (os.path.join(tmp, f"one-sampled-{s}.json")
                                     for s in ("fp32", "bf16"))
    run([sar_train, "--dataset", npy, *sampled, "--metrics-out", one_sampled])
    run([sar_train, "--dataset", npy, *sampled, "--storage", "bf16",
         "--metrics-out", one_sampled_bf16])
    near = max(abs(a - b) / abs(b) for a, b in zip(losses(one_sampled_bf16), losses(one_sampled)))
    check(0 < near <= 1e-2, f"bf16 storage on minibatches: losses within {near:.1e} (relative) "
          "of fp32's, not equal")
    metrics = os.path.join(tmp, "two-sampled-bf16.json")
    run(mpirun(2, sar_train, "--dataset", npy, "--partition", "ptscotch", *sampled, "--storage",
               "bf16", "--metrics-out", metrics))
    worst = max(abs(a - b) for a, b in zip(losses(metrics), losses(one_sampled_bf16)))
    check(len(losses(metrics)) == 3 and worst <= 1e-5,
          f"bf16 storage on minibatches on 2 ranks: losses within {worst:.1e} of one process's")
    checkpoint = os.path.join(tmp, "bf16-checkpoint")
    short = ["--model", "gcn", "--epochs", "2", "--seed", "3"]
    run([sar_train, "--dataset", npy, *short, "--storage", "bf16", "--checkpoint", checkpoint])
    bad = attempt([sar_train, "--dataset", npy, *short, "--resume", checkpoint])
    check(bad.returncode == 1 and 'storage: checkpoint "bf16", this run -' in bad.stderr,
          "an fp32 run refuses to resume a bf16 run's checkpoint, naming the storage")

    # Failures keep the previous store: SIGKILL of every process mid-write, a file-size limit.
    store = os.path.join(tmp, "ptscotch-2")
    kept = os.path.join(tmp, "ptscotch-2-copy")
    subprocess.run(["cp", "-a", store, kept], check=True)
    # The limit binds the ranks only: mpirun under it deadlocks in PMIx's own shared memory.
    limited = ["sh", "-c", 'ulimit -f 19 && exec "$0" "$@"', sar_partition]
    bad = attempt(mpirun(2, *limited, "--dataset", npy, "--parts", "2", "--method", "ptscotch",
                         "--out", store))
    check(bad.returncode != 0 and same_tree(store, kept),
          "a file-size limit mid-write fails and leaves the previous store")
    proc = subprocess.Popen(mpirun(2, sar_partition, "--dataset", npy, "--parts", "2", "--method",
                                   "ptscotch", "--out", store), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    # mpirun gives each rank its own process group: kill every process of its session.
    kill_all = lambda: subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], capture_output=True)
    for line in proc.stdout:
        if line.startswith("writing"):
            kill_all()
            break
    kill_all()
    proc.wait()
    # The killed ranks are gone only once reaped; until then their temporary directory is a
    # live run's, which the next run must leave (on a loaded machine that takes a moment).
    deadline = time.time() + 30
    while time.time() < deadline and subprocess.run(
            ["pgrep", "-s", str(proc.pid)], capture_output=True).returncode == 0:
        time.sleep(0.1)
    check(same_tree(store, kept), "SIGKILL of every process while writing leaves the previous "
          "store")
    run(mpirun(2, sar_partition, "--dataset", npy, "--parts", "2", "--method", "ptscotch",
               "--out", store))
    check(same_tree(store, kept) and not any(".sar-partial-" in n for n in os.listdir(tmp)),
          "the next run replaces the store and removes the killed run's temporary directory")

    # Refusals.
    bad = attempt(mpirun(2, sar_partition, "--dataset", npy, "--parts", "2", "--out",
                         os.path.join(tmp, "m")))
    check(bad.returncode == 1 and "use --method ptscotch" in bad.stderr,
          "--method metis under mpirun is refused, naming ptscotch")
    user = os.path.join(tmp, "user")
    os.makedirs(user)
    open(os.path.join(user, "notes.txt"), "w").write("mine")
    bad = attempt(mpirun(2, sar_partition, "--dataset", npy, "--parts", "2", "--method",
                         "ptscotch", "--out", user))
    check(bad.returncode == 1 and "notes.txt" in bad.stderr and
          open(os.path.join(user, "notes.txt")).read() == "mine",
          "a user's directory as --out is refused, naming its file, and kept")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
