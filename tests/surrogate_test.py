"""Mesh surrogates through the programs (usage: surrogate_test.py SAR_SURROGATE SAR_PREDICT
[MPIRUN]).

1. generate writes a trajectory dataset in DeepMind's layout (meta.json, train/ valid/ test/,
   one .npy per field); a second generate replaces it, a foreign directory is refused.
2. train on one process learns (the loss falls, the test one-step RMSE is below persistence's)
   and saves the model; under mpirun -np 2 (each rank a share of every step's meshes) the
   per-step losses are those of one process (1e-5 relative, float, over the first 50 steps:
   the gradients' sums in another order differ in the last bits, which training amplifies to
   1e-4 after 150 steps at this learning rate) and so are the RMSEs (1e-3).
3. sar-predict --trajectory rolls the saved model out on a test trajectory: each dynamic field
   as a float32 (T, N, 1) .npy whose first step is the trajectory's, and meta.json with the
   RMSE per step.
4. Refusals: a dataset without meta.json, a trajectory that does not exist, a rollout on 2
   ranks, a surrogate's model without --trajectory.
"""
import json
import os
import subprocess
import sys
import tempfile

from npy_files import read_npy

program = sys.argv[1]
predict = sys.argv[2]
mpirun = sys.argv[3] if len(sys.argv) > 3 else None


def run(command, expect=0):
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == expect, (command, result.returncode, result.stderr[-2000:])
    return result


def close(a, b, tolerance):
    return abs(a - b) <= tolerance * max(1.0, abs(b))


with tempfile.TemporaryDirectory(prefix="sar-surrogate-") as work:
    data = os.path.join(work, "waves")
    generate = [program, "generate", "--out", data, "--train", "6", "--valid", "1", "--test",
                "2", "--steps", "14", "--cells-across", "6", "--seed", "4"]
    out = run(generate).stdout
    assert "6 training, 1 validation and 2 test trajectories of 14 steps" in out, out
    with open(os.path.join(data, "meta.json")) as f:
        meta = json.load(f)
    assert meta["trajectory_length"] == 14, meta
    assert meta["features"]["velocity"] == {"type": "dynamic", "shape": [14, -1, 1],
                                            "dtype": "float32"}, meta["features"]
    assert sorted(os.listdir(os.path.join(data, "test"))) == ["traj_0000", "traj_0001"]
    shape, _ = read_npy(os.path.join(data, "test", "traj_0000", "mesh_pos.npy"))
    nodes = shape[0]
    run(generate)  # replaces its own dataset
    foreign = os.path.join(work, "foreign")
    os.makedirs(foreign)
    with open(os.path.join(foreign, "notes.txt"), "w") as f:
        f.write("mine")
    refused = run([program, "generate", "--out", foreign], expect=1).stderr
    assert "notes.txt" in refused or "foreign" in refused, refused
    assert os.path.exists(os.path.join(foreign, "notes.txt"))

    # 2. Training: one process, then two ranks.
    model = os.path.join(work, "waves.sarmodel")
    train = [program, "train", "--dataset", data, "--steps", "150", "--normaliser-steps", "10",
             "--batch-meshes", "3", "--hidden", "24", "--layers", "3", "--lr", "3e-3",
             "--noise", "0.003", "--log-every", "0"]
    run(train + ["--save-model", model, "--metrics-out", os.path.join(work, "one.json")])
    with open(os.path.join(work, "one.json")) as f:
        one = json.load(f)
    losses = one["losses"]
    assert len(losses) == 150, len(losses)
    assert sum(losses[-15:]) < 0.3 * sum(losses[:15]), losses
    assert one["test_one_step_rmse"] < one["test_persistence_one_step_rmse"], one
    assert "test_rollout_rmse_13" in one and "valid_rollout_rmse_10" in one, sorted(one)
    if mpirun:
        two_json = os.path.join(work, "two.json")
        run([mpirun, "-np", "2", "--oversubscribe"] + train +
            ["--metrics-out", two_json, "--threads", "1"])
        with open(two_json) as f:
            two = json.load(f)
        assert two["ranks"] == 2, two
        assert len(two["losses"]) == len(losses)
        for k, (a, b) in enumerate(zip(two["losses"][:50], losses)):
            assert close(a, b, 1e-5), (k, a, b)
        for key in ("test_one_step_rmse", "test_rollout_rmse_13", "valid_rollout_rmse_10"):
            assert close(two[key], one[key], 1e-3), (key, two[key], one[key])

    # 3. A rollout of the saved model.
    rollout = os.path.join(work, "rollout")
    out = run([predict, "--model", model, "--dataset", data, "--trajectory",
               "test/traj_0001", "--out", rollout]).stdout
    assert "a rollout of test/traj_0001, 14 steps" in out, out
    with open(os.path.join(rollout, "meta.json")) as f:
        rolled = json.load(f)
    assert rolled["format"] == "sar-rollout" and rolled["steps"] == 14, rolled
    assert rolled["rmse"][0] == 0 and len(rolled["rmse"]) == 14, rolled["rmse"]
    shape, predicted = read_npy(os.path.join(rollout, "displacement.npy"))
    assert shape == (14, nodes, 1), shape
    _, truth = read_npy(os.path.join(data, "test", "traj_0001", "displacement.npy"))
    assert predicted[:nodes] == truth[:nodes]  # the first state is the trajectory's
    assert predicted[nodes:] != truth[nodes:]

    # 4. Refusals.
    err = run([program, "train", "--dataset", work, "--steps", "1"], expect=1).stderr
    assert "meta.json" in err, err
    err = run([predict, "--model", model, "--dataset", data, "--trajectory",
               "test/traj_0099", "--out", os.path.join(work, "r2")], expect=1).stderr
    assert "test/traj_0099" in err, err
    err = run([predict, "--model", model, "--dataset", data, "--out",
               os.path.join(work, "r4")], expect=1).stderr
    assert "--trajectory" in err, err
    if mpirun:
        err = run([mpirun, "-np", "2", "--oversubscribe", predict, "--model", model,
                   "--dataset", data, "--trajectory", "test/traj_0000", "--out",
                   os.path.join(work, "r3")], expect=1).stderr
        assert "one process" in err, err

print("sar-surrogate and sar-predict: generate, train on 1 and 2 ranks, rollout, refusals: ok")
