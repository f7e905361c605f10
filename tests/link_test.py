"""Link prediction through the programs (usage: link_test.py SAR_TRAIN SAR_CONVERT SAR_PREDICT
SAR_PARTITION [MPIRUN]).

1. sar-convert --split-edges on Cora (../shared/data): split/random/ holds int64 arrays of the
   stated shapes, no held-out positive is an edge of the written graph (either direction),
   the graph lost exactly the held-out edges, and --verify reads it all back.
2. sar-train --task link (GCN, dot) on it learns: test AUC well above chance, every figure
   the metrics promise; --decoder mlp trains too, saved with --save-model: sar-predict
   --embeddings --pairs writes every node's embedding and the scores of the test positives and
   negatives, whose AUC is the test AUC sar-train reported at its best epoch; --hits-at picks
   the K of Hits@K (and --select-by one of them).
3. Under mpirun -np 2 with --partition random (nodes renumbered), double precision: the
   per-epoch losses and the figures of the one-process run (1e-9 relative), full batch and
   with --minibatch (edge minibatches on sampled neighbourhoods, which learn too) and
   --negative-sampler degree (in-degree^0.75 drawn alike however the nodes are numbered). A
   partition store (sar-partition) carries the dataset's split: sar-train --partitions
   trains the one-process run from it, full batch and, from one part on two replicas,
   minibatch.
   A split of a heterogeneous graph (sar-convert --split-edges on planted-hetero) has a
   relation column; R-GCN + DistMult trains on it alike on one process and two ranks, full
   batch and minibatch; a model that erases types says it does not read them.
4. Refusals: a leak (a held-out positive that is an edge) names the file and row unless
   --allow-leak; an id outside the graph names the file and row; a dataset without a split
   says how to make one; link options without --task link, --embeddings for a node model,
   a link model without --embeddings or --pairs, and more negatives per positive than nodes.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from npy_files import read_npy, write_npy

sar_train, sar_convert, sar_predict, sar_partition = sys.argv[1:5]
mpirun = sys.argv[5] if len(sys.argv) > 5 else None
cora = os.path.join(os.environ["SAR_DATA_DIR"], "cora")


def run(command, expect=0):
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == expect, (command, result.returncode, result.stderr[-2000:])
    return result


def pairs(path):
    shape, values = read_npy(path)
    assert len(shape) == 2 and shape[1] == 2, (path, shape)
    return [(values[2 * i], values[2 * i + 1]) for i in range(shape[0])]


def close(a, b, tolerance):
    return abs(a - b) <= tolerance * max(1.0, abs(b))


with tempfile.TemporaryDirectory(prefix="sar-link-") as work:
    # 1. The split.
    links = os.path.join(work, "cora-links")
    out = run([sar_convert, "--dataset", cora, "--split-edges", "0.05,0.10",
               "--per-source-negatives", "20", "--seed", "3", "--out", links, "--verify"])
    assert "verified" in out.stdout, out.stdout
    split = os.path.join(links, "split", "random")
    train, valid, test = (pairs(os.path.join(split, f + "_edge.npy"))
                          for f in ("train", "valid", "test"))
    total = len(train) + len(valid) + len(test)
    assert len(valid) > 0 and abs(len(test) / total - 0.10) < 0.01, (len(valid), len(test))
    shape, _ = read_npy(os.path.join(split, "test_target_node_neg.npy"))
    assert shape == (len(test), 20), shape
    assert len(pairs(os.path.join(split, "valid_edge_neg.npy"))) == len(valid)
    (n,), indptr = read_npy(os.path.join(links, "indptr.npy"))
    _, indices = read_npy(os.path.join(links, "indices.npy"))
    edges = set()
    for v in range(n - 1):
        for k in range(indptr[v], indptr[v + 1]):
            edges.add((indices[k], v))
    for u, v in valid + test:
        assert (u, v) not in edges and (v, u) not in edges, ("leak", u, v)
    assert len(edges) == 2 * len(train), (len(edges), len(train))

    # 2. Training on one process.
    metrics = os.path.join(work, "links.json")
    base = [sar_train, "--dataset", links, "--task", "link", "--quiet"]
    run(base + ["--epochs", "60", "--metrics-out", metrics])
    with open(metrics) as f:
        m = json.load(f)
    for key in ("valid_auc", "test_auc", "valid_hits@20", "test_hits@50", "test_hits@100",
                "valid_mrr", "test_mrr", "best_epoch", "train_loss"):
        assert key in m, (key, m.keys())
    assert m["task"] == "link" and len(m["train_loss"]) == 60
    assert m["test_auc"] > 0.8, m["test_auc"]  # chance 0.5; GAE reports 0.91 after 200 epochs
    assert m["train_loss"][-1] < m["train_loss"][0]
    hits = os.path.join(work, "hits.json")
    run(base + ["--epochs", "2", "--hits-at", "10,30", "--select-by", "hits@30",
                "--metrics-out", hits])
    with open(hits) as f:
        h = json.load(f)
    assert "test_hits@10" in h and "test_hits@30" in h and "test_hits@50" not in h, h.keys()
    err = run(base + ["--select-by", "hits@50", "--hits-at", "10"], expect=1).stderr
    assert "--select-by hits@50" in err and "--hits-at" in err, err
    # 2b. A saved MLP-decoder model scores pairs as training evaluated them.
    model = os.path.join(work, "links.sarmodel")
    run(base + ["--epochs", "8", "--decoder", "mlp", "--negatives", "2", "--select-by", "auc",
                "--save-model", model, "--metrics-out", metrics])
    with open(metrics) as f:
        m = json.load(f)
    test_positive, test_negative = test, pairs(os.path.join(split, "test_edge_neg.npy"))
    asked = os.path.join(work, "asked.npy")
    write_npy(asked, "<i8", (len(test_positive) + len(test_negative), 2),
              [x for pair in test_positive + test_negative for x in pair])
    predicted = os.path.join(work, "predicted")
    run([sar_predict, "--model", model, "--dataset", links, "--embeddings", "--pairs", asked,
         "--out", predicted])
    shape, _ = read_npy(os.path.join(predicted, "embeddings.npy"))
    assert shape == (n - 1, 16), shape  # --hidden's default for GCN
    (count,), scores = read_npy(os.path.join(predicted, "scores.npy"))
    assert count == len(test_positive) + len(test_negative), count
    p_scores, n_scores = scores[:len(test_positive)], scores[len(test_positive):]
    wins = sum((p > q) + 0.5 * (p == q) for p in p_scores for q in n_scores)
    auc = wins / (len(p_scores) * len(n_scores))
    assert abs(auc - m["test_auc"]) < 1e-3, (auc, m["test_auc"], m["best_epoch"])
    err = run([sar_predict, "--model", model, "--dataset", links, "--out", predicted],
              expect=1).stderr
    assert "--embeddings, --pairs" in err, err
    far_pairs = os.path.join(work, "far.npy")
    write_npy(far_pairs, "<i8", (2, 2), [0, 1, 0, n + 5])
    err = run([sar_predict, "--model", model, "--dataset", links, "--pairs", far_pairs,
               "--out", predicted], expect=1).stderr
    assert "far.npy, row 1" in err and "outside" in err, err

    # 3. Two ranks, nodes renumbered by a random partition: the one-process run.
    if mpirun:
        one, two = os.path.join(work, "one.json"), os.path.join(work, "two.json")
        exact = base + ["--epochs", "4", "--precision", "double", "--model", "sage",
                        "--negatives", "3", "--select-by", "mrr"]
        def one_and_two(command, on_two=None):
            """The metrics of `command` on one process and of `on_two` (default: `command`
            with --partition random) on two ranks, which must agree."""
            run(command + ["--metrics-out", one])
            on_two = on_two or command + ["--partition", "random"]
            run([mpirun, "-np", "2", "--oversubscribe"] + on_two + ["--metrics-out", two])
            with open(one) as f:
                a = json.load(f)
            with open(two) as f:
                b = json.load(f)
            for x, y in zip(b["train_loss"], a["train_loss"]):
                assert close(x, y, 1e-9), (b["train_loss"], a["train_loss"])
            for key in ("valid_mrr", "test_mrr", "test_auc", "test_hits@20"):
                assert close(b[key], a[key], 1e-9), (key, b[key], a[key])
            return a

        one_and_two(exact)
        sampled = one_and_two(exact + ["--minibatch", "700", "--fanouts", "5,5", "--epochs", "3",
                                       "--negative-sampler", "degree"])
        assert sampled["minibatch"] == 700 and sampled["fanouts"] == [5, 5], sampled
        assert sampled["negative_sampler"] == "degree", sampled
        assert sampled["train_loss"][-1] < sampled["train_loss"][0], sampled["train_loss"]

        store = os.path.join(work, "links.2")
        out = run([sar_partition, "--dataset", links, "--parts", "2", "--method", "random",
                   "--out", store]).stdout
        assert "copied the link split random" in out, out
        from_store = [x for x in exact if x not in ("--dataset", links)]
        one_and_two(exact, from_store + ["--partitions", store])
        # Minibatches from a store of one part held by both ranks (--replication 2): each rank
        # reads half the split and sends every pair to the part's first replica.
        whole = os.path.join(work, "links.1")
        run([sar_partition, "--dataset", links, "--parts", "1", "--out", whole])
        batches = ["--minibatch", "700", "--fanouts", "5,5", "--epochs", "3"]
        one_and_two(exact + batches,
                    from_store + batches + ["--partitions", whole, "--replication", "2"])

    # 3b. Relations: a split of a heterogeneous graph carries each pair's relation (a third
    #     column), and R-GCN + DistMult scores each with its own diagonal; two ranks agree.
    typed = os.path.join(work, "typed")
    run([sar_convert, "--dataset", "planted-hetero:nodes=600,authors=200,seed=3",
         "--split-edges", "0.1,0.1", "--per-source-negatives", "4", "--out", typed])
    for name in ("train_edge", "valid_edge", "test_edge_neg"):
        shape, _ = read_npy(os.path.join(typed, "split", "random", name + ".npy"))
        assert len(shape) == 2 and shape[1] == 3, (name, shape)
    relational = [sar_train, "--dataset", typed, "--task", "link", "--quiet", "--model", "rgcn",
                  "--decoder", "distmult", "--epochs", "3", "--precision", "double",
                  "--negatives", "2", "--select-by", "mrr"]
    if mpirun:
        one_and_two(relational)
        one_and_two(relational + ["--minibatch", "500", "--fanouts", "4,4"])
    else:
        run(relational)
    err = run([sar_train, "--dataset", typed, "--task", "link", "--epochs", "1", "--model",
               "gcn", "--decoder", "distmult"]).stderr
    assert "relations are not read" in err, err

    # 4. Refusals.
    leaky = os.path.join(work, "leaky")
    shutil.copytree(links, leaky)
    leaky_split = os.path.join(leaky, "split", "random")

    def with_valid(rows):
        """valid_edge.npy := rows, and one more row of per-source negatives (a copy)."""
        write_npy(os.path.join(leaky_split, "valid_edge.npy"), "<i8", (len(rows), 2),
                  [x for pair in rows for x in pair])
        targets = os.path.join(links, "split", "random", "valid_target_node_neg.npy")
        (count, k), values = read_npy(targets)
        write_npy(os.path.join(leaky_split, "valid_target_node_neg.npy"), "<i8", (count + 1, k),
                  list(values) + list(values[:k]))

    bad = valid + [train[5]]
    with_valid(bad)
    leaky_run = [sar_train, "--dataset", leaky, "--task", "link", "--epochs", "1", "--quiet"]
    err = run(leaky_run, expect=1).stderr
    assert "valid_edge.npy" in err and "row %d" % (len(bad) - 1) in err and "leak" in err, err
    run(leaky_run + ["--allow-leak"])
    if mpirun:  # each rank reads a share of the split; the leak is found where its ends live
        err = run([mpirun, "-np", "2", "--oversubscribe"] + leaky_run + ["--partition", "random"],
                  expect=1).stderr
        assert "valid_edge.npy, row %d" % (len(bad) - 1) in err and "leak" in err, err
    far = valid + [(0, n - 1)]  # n - 1 nodes: indptr has n entries
    with_valid(far)
    err = run(leaky_run, expect=1).stderr
    assert "valid_edge.npy, row %d" % (len(far) - 1) in err and "outside" in err, err
    err = run([sar_train, "--dataset", cora, "--task", "link", "--quiet"], expect=1).stderr
    assert "split/random" in err and "--split-edges" in err, err
    err = run([sar_train, "--dataset", links, "--decoder", "mlp", "--quiet"], expect=1).stderr
    assert "--decoder is an option of --task link" in err, err
    node_model = os.path.join(work, "node.sarmodel")
    run([sar_train, "--dataset", cora, "--epochs", "1", "--quiet", "--save-model", node_model])
    err = run([sar_predict, "--model", node_model, "--dataset", cora, "--embeddings",
               "--out", os.path.join(work, "node-predicted")], expect=1).stderr
    assert "--embeddings applies to a link-prediction model" in err, err
    err = run(base + ["--negatives", "100000"], expect=1).stderr
    assert "--negatives 100000 is more than the graph's 2708 nodes" in err, err
print("link prediction through the programs: all checks passed")
