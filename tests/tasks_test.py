"""Tasks beyond classification through the programs, and saved models (usage: tasks_test.py
SAR_TRAIN SAR_PARTITION SAR_CONVERT SAR_PREDICT [MPIRUN]).

1. sar-train --task regress on chameleon (../shared/data): test R^2 well above the train-mean
   baseline (0) in the metrics as test_r2, with the targets' mean and scale; without --task
   the dataset has no labels and the error names --task regress; --raw-targets trains too.
2. sar-convert --task regress writes a .npy dataset that declares its task: sar-train on it
   needs no --task and gives the same run; a contradicting --task is refused.
3. sar-partition of it, and sar-train on the store under mpirun -np 2: the losses of the
   one-process run (1e-5 relative).
4. A multi-label .npy dataset written here: trained, test_rocauc reported; a target of 2 or a
   NaN target is refused naming targets.npy.
5. sar-train --save-model, then sar-predict: the predictions (original units) give the test
   R^2 sar-train reported; on 2 ranks over the store the same predictions (1e-4); a dataset of
   another feature width and a damaged model file are refused; a classification model writes
   classes.npy whose test accuracy is the reported one.
6. An mpnn over edge features (a planted graph whose edges tell inside from across a class):
   learns, gives the same losses on 2 ranks, predicts once saved, and refuses a dataset of
   another edge-feature width. With less noise on the edges, a GCN weighing its edges by edge
   feature 0 beats the unweighted one and one weighing them by the noise column (1), gives the
   same losses on 2 ranks and predicts once saved; a column the dataset lacks and
   --edge-weight on another model are refused. A GAT whose attention reads the edge features
   (--edge-attention) learns from them (far better than from edge features of pure noise),
   gives the same losses on 2 ranks and predicts once saved.
7. Minibatch training (sampled neighbourhoods) of both tasks: chameleon regression and the
   multi-label ring learn as full-batch training does. Models that read edge features train
   on minibatches (each sampled block carries its edges' rows): the mpnn of 6 learns, gives
   the same losses on 2 ranks, and an edge state, which cannot carry over from block to
   block, is refused.
"""
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile

from npy_files import read_npy, write_npy

sar_train, sar_partition, sar_convert, sar_predict = sys.argv[1:5]
mpirun = sys.argv[5] if len(sys.argv) > 5 else None
chameleon = os.path.join(os.environ["SAR_DATA_DIR"], "chameleon")


def run(command, expect=0):
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == expect, (command, result.returncode, result.stderr[-2000:])
    return result


def train(dataset, *options, expect=0, launcher=()):
    with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
        result = run([*launcher, sar_train, "--dataset", dataset, "--model", "gcn", "--quiet",
                      "--metrics-out", metrics.name, *options], expect)
        return result, (json.load(open(metrics.name)) if expect == 0 else None)


def assert_same_losses(one, two):
    """Per-epoch training losses of two runs' metrics (over the shorter) within 1e-5 relative."""
    worst = max(abs(a - b) / abs(a) for a, b in zip(one["train_loss"], two["train_loss"]))
    assert worst <= 1e-5, (worst, one["train_loss"][:3], two["train_loss"][:3])


def r2(pred, y):
    mean = sum(y) / len(y)
    return 1 - sum((p - t) ** 2 for p, t in zip(pred, y)) / sum((t - mean) ** 2 for t in y)


def write_multilabel(directory, targets):
    """A ring of n nodes whose features are its labels (as -1 / 1) and a constant."""
    n = len(targets)
    os.makedirs(directory)
    indptr, indices = [0], []
    for i in range(n):
        indices += sorted({(i - 1) % n, (i + 1) % n})
        indptr.append(len(indices))
    features = [[2 * t[0] - 1, 2 * t[1] - 1, 2 * t[2] - 1] for t in targets]
    write_npy(os.path.join(directory, "indptr.npy"), "<i8", [n + 1], indptr)
    write_npy(os.path.join(directory, "indices.npy"), "<i8", [len(indices)], indices)
    write_npy(os.path.join(directory, "features.npy"), "<f4", [n, 3],
              [v for row in features for v in row])
    write_npy(os.path.join(directory, "targets.npy"), "<f4", [n, 3],
              [v for row in targets for v in row])
    write_npy(os.path.join(directory, "split.npy"), "|u1", [n], [1, 1, 2, 3] * (n // 4))
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump({"format": "sar-npy-dataset", "version": 1, "name": "ring", "num_nodes": n,
                   "num_edges": len(indices), "feature_dim": 3, "num_classes": 0,
                   "task": "multilabel", "num_outputs": 3}, f)


with tempfile.TemporaryDirectory() as tmp:
    # 1. Regression on chameleon.
    epochs = ["--epochs", "40"]
    _, m = train(chameleon, "--task", "regress", *epochs)
    assert m["task"] == "regress" and "test_acc" not in m, m
    assert math.isfinite(m["test_r2"]) and m["test_r2"] > 0.3, m["test_r2"]
    assert m["best_val_r2"] > 0.3 and len(m["target_scale"]) == 1 and m["target_scale"][0] > 0, m
    r, _ = train(chameleon, *epochs, expect=1)
    assert "no features, labels or split" in r.stderr and "--task regress" in r.stderr, r.stderr
    _, raw = train(chameleon, "--task", "regress", "--raw-targets", *epochs)
    assert math.isfinite(raw["test_r2"]) and "target_scale" not in raw, raw
    r, _ = train("planted:nodes=200", "--task", "regress", expect=1)
    assert "classification dataset" in r.stderr, r.stderr

    # 2. A converted dataset declares its task.
    npy = os.path.join(tmp, "chameleon-npy")
    run([sar_convert, "--dataset", chameleon, "--task", "regress", "--out", npy, "--verify"])
    assert json.load(open(os.path.join(npy, "meta.json")))["task"] == "regress"
    _, again = train(npy, *epochs)
    assert again["train_loss"] == m["train_loss"] and again["test_r2"] == m["test_r2"], again
    r, _ = train(npy, "--task", "classify", *epochs, expect=1)
    assert "declares the task regress" in r.stderr, r.stderr

    # 3. The same on 2 ranks through a partition store.
    if mpirun:
        store = os.path.join(tmp, "store")
        run([sar_partition, "--dataset", npy, "--parts", "2", "--out", store])
        _, two = train("", "--partitions", store, *epochs,
                       launcher=(mpirun, "-np", "2", "--oversubscribe"))
        worst = max(abs(a - b) / abs(b) for a, b in zip(two["train_loss"], m["train_loss"]))
        assert worst <= 1e-5 and abs(two["test_r2"] - m["test_r2"]) <= 1e-4, (worst, two)
        r, _ = train("", "--partitions", store, "--task", "multilabel", expect=1,
                     launcher=(mpirun, "-np", "2", "--oversubscribe"))
        assert "holds a regress dataset" in r.stderr, r.stderr

    # 4. Multi-label.
    n = 96
    targets = [[float((7 * i) % 5 < 2), float((11 * i) % 3 == 0), float((13 * i) % 7 < 3)]
               for i in range(n)]
    multi = os.path.join(tmp, "multi")
    write_multilabel(multi, targets)
    _, ml = train(multi, "--model", "sage", "--epochs", "100", "--lr", "0.05", "--dropout", "0")
    assert ml["task"] == "multilabel" and ml["test_rocauc"] > 0.8, ml
    for name, bad in (("two", 2.0), ("nan", float("nan"))):
        broken = os.path.join(tmp, name)
        write_multilabel(broken, [[bad if i == 5 else t[0], t[1], t[2]]
                                  for i, t in enumerate(targets)])
        r, _ = train(broken, expect=1)
        assert "targets.npy" in r.stderr and "of node 5 (column 0)" in r.stderr, r.stderr
    # 5. Saved models predict.
    model = os.path.join(tmp, "chameleon.sarmodel")
    _, saved = train(npy, *epochs, "--save-model", model)
    predicted = os.path.join(tmp, "predicted")
    run([sar_predict, "--model", model, "--dataset", npy, "--out", predicted])
    shape, values = read_npy(os.path.join(predicted, "predictions.npy"))
    assert shape == (2277, 1), shape
    _, targets = read_npy(os.path.join(npy, "targets.npy"))
    _, split = read_npy(os.path.join(npy, "split.npy"))
    test = [i for i in range(2277) if split[i] == 3]
    got = r2([values[i] for i in test], [targets[i] for i in test])
    assert abs(got - saved["test_r2"]) < 1e-4, (got, saved["test_r2"])
    if mpirun:
        on_store = os.path.join(tmp, "predicted-2")
        run([mpirun, "-np", "2", "--oversubscribe", sar_predict, "--model", model,
             "--partitions", store, "--out", on_store])
        _, values2 = read_npy(os.path.join(on_store, "predictions.npy"))
        worst = max(abs(a - b) for a, b in zip(values, values2))
        assert worst < 1e-4 * max(abs(v) for v in values), worst
    r = run([sar_predict, "--model", model, "--dataset", multi, "--out", predicted], expect=1)
    assert "takes 3132 features" in r.stderr and "has 3" in r.stderr, r.stderr
    with open(model, "rb") as f:
        content = f.read()
    damaged = os.path.join(tmp, "damaged.sarmodel")
    with open(damaged, "wb") as f:
        f.write(content[:len(content) // 2])
    r = run([sar_predict, "--model", damaged, "--dataset", npy, "--out", predicted], expect=1)
    assert "damaged.sarmodel" in r.stderr and "checksum" in r.stderr, r.stderr
    cora = os.path.join(os.environ["SAR_DATA_DIR"], "cora")
    cora_model = os.path.join(tmp, "cora.sarmodel")
    _, m = train(cora, "--epochs", "30", "--save-model", cora_model)
    run([sar_predict, "--model", cora_model, "--dataset", cora, "--out", predicted])
    (n,), classes = read_npy(os.path.join(predicted, "classes.npy"))
    with gzip.open(os.path.join(cora, "raw", "node-label.csv.gz"), "rt") as f:
        labels = [int(line) for line in f]
    test = [int(line) for line in gzip.open(os.path.join(cora, "split", "public", "test.csv.gz"), "rt")]
    accuracy = sum(classes[i] == labels[i] for i in test) / len(test)
    assert abs(accuracy - m["test_acc"]) < 1e-9, (accuracy, m["test_acc"])

    # 6. Edge features: an mpnn on a planted graph whose edges tell inside from across a
    #    class; the same losses on 2 ranks (partitioned in memory); saved, it predicts, and a
    #    dataset of another edge-feature width is refused.
    planted = "planted:nodes=1500,classes=4,degree=8,features=8,noise=4,edge_features=2"
    def mpnn(*options, launcher=()):
        with tempfile.NamedTemporaryFile(suffix=".json") as metrics:
            run([*launcher, sar_train, "--dataset", planted, "--model", "mpnn", "--quiet",
                 "--epochs", "60", "--lr", "0.01", "--hidden", "16", "--layers", "2",
                 "--metrics-out",
                 metrics.name, *options])
            return json.load(open(metrics.name))
    edge_model = os.path.join(tmp, "mpnn.sarmodel")
    m = mpnn("--save-model", edge_model)
    assert m["test_acc"] > 0.4, m["test_acc"]  # 4 classes: chance is 0.25
    if mpirun:
        m2 = mpnn("--partition", "random", launcher=(mpirun, "-np", "2", "--oversubscribe"))
        assert_same_losses(m, m2)
    run([sar_predict, "--model", edge_model, "--dataset", planted, "--out", predicted])
    r = run([sar_predict, "--model", edge_model, "--dataset", planted.replace(
        "edge_features=2", "edge_features=3"), "--out", predicted], expect=1)
    assert "reads 2 features per edge" in r.stderr and "has 3" in r.stderr, r.stderr
    weighted_model = os.path.join(tmp, "weighted.sarmodel")
    clean = planted + ",edge_noise=0.3"
    gcn = ("--epochs", "60", "--dropout", "0")
    _, plain = train(clean, *gcn)
    _, weighted = train(clean, *gcn, "--edge-weight", "0", "--save-model", weighted_model)
    _, by_noise = train(clean, *gcn, "--edge-weight", "1")
    accuracies = (weighted["test_acc"], plain["test_acc"], by_noise["test_acc"])
    assert accuracies[0] > accuracies[1] + 0.05 and accuracies[2] < accuracies[1], accuracies
    if mpirun:
        _, two = train(clean, *gcn, "--edge-weight", "0", "--partition", "random",
                       launcher=(mpirun, "-np", "2", "--oversubscribe"))
        assert_same_losses(weighted, two)
    run([sar_predict, "--model", weighted_model, "--dataset", clean, "--out", predicted])
    r, _ = train(planted, "--edge-weight", "2", expect=1)
    assert "--edge-weight 2, but the dataset has 2 features per edge" in r.stderr, r.stderr
    r, _ = train(planted, "--model", "sage", "--edge-weight", "0", expect=1)
    assert "--edge-weight is an option of --model gcn" in r.stderr, r.stderr
    attention_model = os.path.join(tmp, "attention.sarmodel")
    gat = ("--model", "gat", "--edge-attention", "--epochs", "100", "--lr", "0.01")
    _, attention = train(clean, *gat, "--save-model", attention_model)
    _, noisy = train(planted + ",edge_noise=100", *gat)
    assert attention["test_acc"] > noisy["test_acc"] + 0.15, (attention["test_acc"], noisy["test_acc"])
    if mpirun:
        # 40 epochs: float rounding (sums in other orders) grows to 1e-5 after about 80.
        _, two = train(clean, *gat, "--epochs", "40", "--partition", "random",
                       launcher=(mpirun, "-np", "2", "--oversubscribe"))
        assert_same_losses(attention, two)
    run([sar_predict, "--model", attention_model, "--dataset", clean, "--out", predicted])
    r, _ = train(chameleon, "--task", "regress", *gat, expect=1)
    assert "--edge-attention, but the dataset has no edge features" in r.stderr, r.stderr

    # 7. Minibatches.
    _, mb = train(chameleon, "--task", "regress", "--model", "sage", "--minibatch", "128",
                  *epochs)
    assert mb["minibatch"] == 128 and mb["test_r2"] > 0.3, mb
    _, mbl = train(multi, "--model", "sage", "--minibatch", "16", "--epochs", "100", "--lr",
                   "0.05", "--dropout", "0")
    assert mbl["test_rocauc"] > 0.8, mbl
    sampled = ("--minibatch", "64", "--no-edge-state")
    m = mpnn(*sampled)
    assert m["minibatch"] == 64 and m["test_acc"] > 0.4, m["test_acc"]
    if mpirun:
        # In double: float rounding (sums in other orders) over 60 epochs of steps reaches 1e-5.
        exact = (*sampled, "--precision", "double")
        m2 = mpnn(*exact, "--partition", "random", launcher=(mpirun, "-np", "2", "--oversubscribe"))
        assert_same_losses(mpnn(*exact), m2)
    r = run([sar_train, "--dataset", planted, "--model", "mpnn", "--layers", "2", "--minibatch",
             "64"], expect=1)
    assert "--model mpnn with --minibatch needs --no-edge-state" in r.stderr, r.stderr
print("tasks: ok")
