"""Graph-level tasks through sar-train and sar-predict (usage: graph_level_test.py SAR_TRAIN
SAR_PREDICT [MPIRUN]).

1. MUTAG (tests/data/MUTAG, a TU dataset of 188 molecules): sar-train --task graph-classify
   --model gin trains on fold 0 of a 10-fold split and reports test_acc at the best validation
   epoch, well above the majority class after a few epochs; a split folder (split/NAME/
   {train,valid,test}.npy) is used by default, two need --split.
2. Under mpirun -np 2 (data parallel: each rank a share of every minibatch of graphs), with
   batch norm and dropout in double, the per-epoch losses and the test figures of one process
   (1e-7 relative); graph-regress (GCN, float) on MUTAG's node counts written as
   DS_graph_attributes.txt alike (1e-5).
3. Saved models: sar-train --save-model on a split folder, then sar-predict on the dataset:
   a prediction per graph whose accuracy (classes.npy) and RMSE (predictions.npy, the targets'
   units) over the split's test graphs are the figures sar-train reported for the saved epoch.
4. Refusals: a graph task on a dataset that is not a TU directory, graph options with a node
   task, --fold outside --folds, --split with --folds, a split not in split/, options graph
   tasks do not take (yet), a task whose targets the dataset lacks; a graph model given a
   dataset that is not a TU directory.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from npy_files import read_npy, write_npy

sar_train, sar_predict = sys.argv[1:3]
mpirun = sys.argv[3] if len(sys.argv) > 3 else None
mutag = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "MUTAG")


def run(command, expect=0):
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == expect, (command, result.returncode, result.stderr[-2000:])
    return result


def metrics_of(command, path):
    run(command + ["--metrics-out", path])
    with open(path) as f:
        return json.load(f)


def close(a, b, tolerance):
    return abs(a - b) <= tolerance * max(1.0, abs(b))


with tempfile.TemporaryDirectory(prefix="sar-graphs-") as work:
    # 1. Classification on one process.
    base = [sar_train, "--dataset", mutag, "--task", "graph-classify", "--model", "gin",
            "--readout", "sum", "--batch-graphs", "32", "--folds", "10", "--fold", "0",
            "--hidden", "32", "--quiet"]
    accuracies = []
    for fold in ("0", "1", "2"):
        m = metrics_of(base + ["--epochs", "40", "--dropout", "0", "--fold", fold],
                       os.path.join(work, "one.json"))
        assert m["task"] == "graph-classify" and m["dataset"] == "MUTAG", m
        assert m["graphs"]["test"] in (18, 19) and m["epochs"] == 40, m
        assert m["train_loss"][-1] < 0.5 * m["train_loss"][0], m["train_loss"]
        accuracies.append(m["test_acc"])
    assert sum(accuracies) / 3 >= 0.75, accuracies  # the majority class is 0.66

    # A split folder: used by default; with two, --split picks one.
    copy = os.path.join(work, "MUTAG")
    shutil.copytree(mutag, copy)
    for name, test in (("first", range(0, 40)), ("second", range(40, 80))):
        folder = os.path.join(copy, "split", name)
        os.makedirs(folder)
        rest = [g for g in range(188) if g not in test]
        write_npy(os.path.join(folder, "train.npy"), "<i8", [len(rest) - 20], rest[20:])
        write_npy(os.path.join(folder, "valid.npy"), "<i8", [20], rest[:20])
        write_npy(os.path.join(folder, "test.npy"), "<i8", [40], list(test))
    on_copy = [a if a != mutag else copy for a in base if a not in ("--folds", "10", "--fold", "0")]
    err = run(on_copy + ["--epochs", "1"], expect=1).stderr
    assert "holds several splits (first, second): pick one with --split" in err, err
    m = metrics_of(on_copy + ["--epochs", "2", "--split", "second"], os.path.join(work, "s.json"))
    assert m["split"] == "split/second", m
    assert m["graphs"] == {"train": 128, "valid": 20, "test": 40}, m
    shutil.rmtree(os.path.join(copy, "split", "first"))
    m = metrics_of(on_copy + ["--epochs", "2"], os.path.join(work, "s1.json"))
    assert m["split"] == "split/second", m
    err = run(on_copy + ["--epochs", "1", "--split", "third"], expect=1).stderr
    assert "--split third" in err and "holds second" in err, err

    # Regression targets: each graph's node count.
    with open(os.path.join(copy, "MUTAG_graph_indicator.txt")) as f:
        indicator = [int(line) for line in f]
    sizes = [indicator.count(g + 1) for g in range(188)]
    with open(os.path.join(copy, "MUTAG_graph_attributes.txt"), "w") as f:
        f.write("".join(f"{n}\n" for n in sizes))

    # 2. Data parallel on two ranks: the one-process losses.
    if mpirun:
        # Batch norm in double: evaluation on the running statistics of near-constant channels
        # (one-hot inputs) magnifies the rounding of another summation order (the statistics'
        # sums over 1 or 2 ranks' rows): 1e-9 in double, 1e-3 in float (training: 1e-11).
        runs = [(base + ["--batch-norm", "--dropout", "0.3", "--epochs", "4", "--precision",
                         "double"], "test_acc", 1e-7),
                ([a if a != "graph-classify" else "graph-regress" for a in on_copy] +
                 ["--model", "gcn", "--readout", "mean", "--epochs", "4", "--batch-graphs", "15"],
                 "test_r2", 1e-5)]
        for command, figure, tolerance in runs:
            one = metrics_of(command, os.path.join(work, "p1.json"))
            run([mpirun, "-np", "2", "--oversubscribe"] + command +
                ["--metrics-out", os.path.join(work, "p2.json")])
            with open(os.path.join(work, "p2.json")) as f:
                two = json.load(f)
            assert two["ranks"] == 2, two
            for key in ("train_loss", "valid_loss"):
                assert all(close(a, b, tolerance) for a, b in zip(one[key], two[key])), (
                    key, one[key], two[key])
            assert close(one[figure], two[figure], tolerance), (figure, one[figure], two[figure])
            assert one["best_epoch"] == two["best_epoch"], (one, two)
        assert "test_rmse" in one and "test_mae" in one and one["target_scale"], one

    # 3. A saved model predicts every graph; on split/second's test graphs (40..79) its figures
    # are those reported for the saved (best validation) epoch.
    with open(os.path.join(copy, "MUTAG_graph_labels.txt")) as f:
        labels = [0 if int(line) < 0 else 1 for line in f]  # -1, 1 -> 0, 1 (sorted)
    test = range(40, 80)
    model = os.path.join(work, "mutag.sarmodel")
    m = metrics_of(on_copy + ["--epochs", "10", "--save-model", model],
                   os.path.join(work, "saved.json"))
    out = os.path.join(work, "predicted")
    run([sar_predict, "--model", model, "--dataset", copy, "--out", out])
    (shape, classes), (logits, _) = (read_npy(os.path.join(out, f)) for f in ("classes.npy",
                                                                              "predictions.npy"))
    assert tuple(shape) == (188,) and tuple(logits) == (188, 2), (shape, logits)
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    assert meta["task"] == "graph-classify" and meta["num_graphs"] == 188, meta
    accuracy = sum(classes[g] == labels[g] for g in test) / len(test)
    assert abs(accuracy - m["test_acc"]) < 1e-9, (accuracy, m["test_acc"], m["best_epoch"])
    _, own = read_npy(os.path.join(out, "labels.npy"))  # MUTAG's own labels, -1 and 1
    assert all(own[g] == (-1 if classes[g] == 0 else 1) for g in range(188)), own[:10]
    regress = [a if a != "graph-classify" else "graph-regress" for a in on_copy]
    m = metrics_of(regress + ["--model", "gcn", "--readout", "mean", "--epochs", "6",
                              "--save-model", model], os.path.join(work, "saved.json"))
    run([sar_predict, "--model", model, "--dataset", copy, "--out", out])
    shape, predictions = read_npy(os.path.join(out, "predictions.npy"))
    assert tuple(shape) == (188, 1), shape
    rmse = (sum((predictions[g] - sizes[g]) ** 2 for g in test) / len(test)) ** 0.5
    assert close(rmse, m["test_rmse"], 1e-4), (rmse, m["test_rmse"])
    err = run([sar_predict, "--model", model, "--dataset", "planted", "--out", out],
              expect=1).stderr
    assert "graph-regress model: --dataset must be a TU dataset directory" in err, err

    # 4. Refusals.
    err = run([sar_train, "--task", "graph-classify", "--dataset", "planted"], expect=1).stderr
    assert "reads a TU dataset directory" in err, err
    err = run([sar_train, "--readout", "mean", "--epochs", "1"], expect=1).stderr
    assert "--readout is an option of --task graph-classify and graph-regress" in err, err
    err = run(base + ["--fold", "10"], expect=1).stderr
    assert "--fold 10 of 10 folds" in err, err
    err = run(on_copy + ["--split", "second", "--folds", "5"], expect=1).stderr
    assert "exclude each other" in err, err
    err = run(base + ["--minibatch", "64"], expect=1).stderr
    assert "does not take --minibatch yet" in err, err
    err = run(base + ["--patience", "5"], expect=1).stderr
    assert "does not take --patience" in err, err
    err = run(base + ["--task", "graph-regress"], expect=1).stderr
    assert "has no MUTAG_graph_attributes.txt" in err, err

print("graph-level tasks: ok")
