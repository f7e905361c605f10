#!/usr/bin/env python3
"""Kill-and-resume of sar-train (issue: nothing lost).

For GCN, GraphSAGE and GAT with dropout and batch norm, on 1 process and on 2 ranks: a run
with --checkpoint is killed with SIGKILL (every process of the job) at a random epoch, resumed
from its last checkpoint, and must end with parameters, optimiser state and batch norm
statistics bitwise identical to an uninterrupted run's, and the same loss history. A
checkpoint taken on 2 ranks resumes on 1 and on 4 with the uninterrupted losses to 1e-5.
R-GCN with per-node embeddings of a featureless type (rows held a part per rank) trains on 2
ranks as on 1, and its 2-rank checkpoint resumes on 1 and on 4 with the uninterrupted losses;
so does it on sampled minibatches (2 ranks as 1; a 2-rank checkpoint resumed on 4).
Settings that differ from the checkpoint's are refused, naming the setting.

usage: checkpoint_test.py SAR_TRAIN SAR_PARTITION   (run by meson test in the mpi suite)
"""
import filecmp, json, os, random, signal, subprocess, sys, tempfile

sar_train, sar_partition = sys.argv[1], sys.argv[2]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
DATASET = "planted:nodes=3000"
EPOCHS = {"gcn": 40, "sage": 30, "gat": 24}
seed = int(os.environ.get("SAR_TEST_SEED", random.randrange(1 << 30)))
rng = random.Random(seed)
print(f"random kill epochs from seed {seed} (SAR_TEST_SEED={seed} repeats them)")
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)
    return ok


def command(ranks, stores, model, *args):
    common = ["--model", model, "--batch-norm", "--dropout", "0.5", "--seed", "3",
              "--epochs", str(EPOCHS[model]), "--log-every", "1", *args]
    if ranks == 1:
        return [sar_train, "--dataset", DATASET, *common]
    return ["mpirun", "-np", str(ranks), "--oversubscribe", sar_train,
            "--partitions", stores[ranks], *common]


def run(cmd):
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{result.stdout}{result.stderr}")
    return result


def run_killed(cmd, epoch):
    """Runs cmd in its own process group and SIGKILLs the whole group once a progress line of
    `epoch` appears on stderr; returns whether the kill landed before the run finished. Rank 0
    stops itself (SIGSTOP) as epoch + 1 ends, so however late the kill lands, no checkpoint
    after epoch + 1 can be written (a race with the line would let a fast run go on)."""
    stop = dict(env, SAR_TRAIN_INJECT_FAILURE=f"{epoch + 1}:0:stop")
    proc = subprocess.Popen(cmd, env=stop, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    killed = False
    for line in proc.stderr:
        if line.startswith(f"epoch {epoch:4d} "):
            # The whole session: mpirun puts each rank in a process group of its own.
            subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], capture_output=True)
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
    proc.stderr.close()
    proc.wait()
    subprocess.run(["pkill", "-KILL", "-g", str(proc.pid)], capture_output=True)
    return killed and proc.returncode == -signal.SIGKILL


def losses(metrics_file):
    with open(metrics_file) as f:
        return json.load(f)["train_loss"]


def same_state(a, b):
    names = [n for n in sorted(os.listdir(a)) if n.endswith(".npy")]
    return names == sorted(n for n in os.listdir(b) if n.endswith(".npy")) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


with tempfile.TemporaryDirectory(prefix="sar-checkpoint-") as tmp:
    stores = {}
    for parts in (2, 4):
        stores[parts] = os.path.join(tmp, f"planted-{parts}")
        run([sar_partition, "--dataset", DATASET, "--parts", str(parts), "--out", stores[parts]])

    for model in ("gcn", "sage", "gat"):
        for ranks in (1, 2):
            name = f"{model} on {ranks} rank{'s' if ranks > 1 else ''}"
            ref, ck = os.path.join(tmp, f"{model}-{ranks}-ref"), os.path.join(tmp, f"{model}-{ranks}")
            run(command(ranks, stores, model, "--checkpoint", ref, "--checkpoint-every", "1000",
                        "--metrics-out", ref + ".json"))
            epoch = rng.randint(5, EPOCHS[model] - 5)
            if not check(run_killed(command(ranks, stores, model, "--checkpoint", ck,
                                            "--checkpoint-every", "3"), epoch),
                         f"{name}: SIGKILL of every process at epoch {epoch}"):
                continue
            with open(os.path.join(ck, "checkpoint.json")) as f:
                done = len(json.load(f)["progress"]["history"])
            # Under mpirun the progress line reaches us through the launcher, so the ranks may
            # be an epoch or two further when the kill lands; the run must not have ended.
            check(done % 3 == 0 and done <= epoch + (1 if ranks == 1 else 3) and
                  done < EPOCHS[model],
                  f"{name}: the last complete checkpoint is after epoch {done - 1}")
            run(command(ranks, stores, model, "--resume", ck, "--checkpoint", ck,
                        "--metrics-out", ck + ".json"))
            check(same_state(ref, ck), f"{name}: resumed parameters, optimiser state and batch "
                  "norm statistics are bitwise those of the uninterrupted run")
            check(losses(ck + ".json") == losses(ref + ".json"),
                  f"{name}: the resumed loss history equals the uninterrupted one")

    # A checkpoint from 2 ranks resumes on 1 and on 4 ranks.
    half = os.path.join(tmp, "half")
    run(command(2, stores, "gcn", "--epochs", "20", "--checkpoint", half))
    reference = losses(os.path.join(tmp, "gcn-2-ref.json"))
    for ranks in (1, 4):
        out = os.path.join(tmp, f"from-2-on-{ranks}.json")
        run(command(ranks, stores, "gcn", "--resume", half, "--metrics-out", out))
        got = losses(out)
        worst = max(abs(a - b) for a, b in zip(got, reference))
        check(len(got) == len(reference) and worst <= 1e-5,
              f"a 2-rank checkpoint resumed on {ranks} rank(s): losses within {worst:.1e} of "
              "the uninterrupted 2-rank run")

    # R-GCN with embeddings of the featureless authors: the rows are gathered into the
    # checkpoint and dealt to the ranks that hold their nodes on resume.
    hetero = "planted-hetero:nodes=1500,authors=500,author_features=0"
    for parts in (2, 4):
        run([sar_partition, "--dataset", hetero, "--parts", str(parts), "--out",
             os.path.join(tmp, f"hetero-{parts}")])

    def rgcn(ranks, *args):
        common = ["--model", "rgcn", "--node-embeddings", "--hidden", "16", "--seed", "4",
                  "--epochs", "16", *args]
        if ranks == 1:
            return [sar_train, "--dataset", hetero, *common]
        return ["mpirun", "-np", str(ranks), "--oversubscribe", sar_train, "--partitions",
                os.path.join(tmp, f"hetero-{ranks}"), *common]

    whole = os.path.join(tmp, "rgcn-1.json")
    run(rgcn(1, "--metrics-out", whole))
    run(rgcn(2, "--metrics-out", os.path.join(tmp, "rgcn-2.json")))
    reference = losses(os.path.join(tmp, "rgcn-2.json"))
    worst = max(abs(a - b) for a, b in zip(losses(whole), reference))
    check(worst <= 1e-5, f"rgcn with node embeddings: 2 ranks give the 1-process losses "
          f"within {worst:.1e}")
    half = os.path.join(tmp, "rgcn-half")
    run(rgcn(2, "--epochs", "8", "--checkpoint", half))
    with open(os.path.join(half, "checkpoint.json")) as f:
        tables = json.load(f)["tables"]
    check([t["rows"] for t in tables] == [500],
          f"the 2-rank checkpoint holds every author's row ({[t['rows'] for t in tables]})")
    for ranks in (1, 4):
        out = os.path.join(tmp, f"rgcn-from-2-on-{ranks}.json")
        run(rgcn(ranks, "--resume", half, "--metrics-out", out))
        got = losses(out)
        worst = max(abs(a - b) for a, b in zip(got, reference))
        check(len(got) == len(reference) and worst <= 1e-5,
              f"rgcn with node embeddings: a 2-rank checkpoint resumed on {ranks} rank(s): "
              f"losses within {worst:.1e} of the uninterrupted run")
    # On minibatches each step borrows its input nodes' rows from the ranks that hold them
    # and returns their gradients there; a 2-rank checkpoint resumes on 4 ranks.
    minibatch = ("--minibatch", "128", "--fanouts", "5,5", "--epochs", "6")
    run(rgcn(1, *minibatch, "--metrics-out", os.path.join(tmp, "rgcn-mb-1.json")))
    run(rgcn(2, *minibatch, "--metrics-out", os.path.join(tmp, "rgcn-mb-2.json")))
    reference = losses(os.path.join(tmp, "rgcn-mb-1.json"))
    worst = max(abs(a - b) for a, b in zip(losses(os.path.join(tmp, "rgcn-mb-2.json")), reference))
    check(worst <= 1e-5, f"rgcn with node embeddings on minibatches: 2 ranks give the 1-process "
          f"losses within {worst:.1e}")
    half = os.path.join(tmp, "rgcn-mb-half")
    run(rgcn(2, *minibatch, "--epochs", "3", "--checkpoint", half))
    out = os.path.join(tmp, "rgcn-mb-from-2-on-4.json")
    run(rgcn(4, *minibatch, "--resume", half, "--metrics-out", out))
    got = losses(out)
    worst = max(abs(a - b) for a, b in zip(got, reference))
    check(len(got) == len(reference) and worst <= 1e-5,
          f"rgcn with node embeddings on minibatches: a 2-rank checkpoint resumed on 4 ranks: "
          f"losses within {worst:.1e} of the 1-process run")

    # Other settings are refused, naming what differs; a missing checkpoint is an error.
    bad = subprocess.run(command(1, stores, "gcn", "--resume", half, "--hidden", "32"), env=env,
                         capture_output=True, text=True)
    check(bad.returncode != 0 and "hidden: checkpoint 16, this run 32" in bad.stderr,
          "a resume with another --hidden is refused, naming it")
    bad = subprocess.run(command(1, stores, "gcn", "--resume", os.path.join(tmp, "none")),
                         env=env, capture_output=True, text=True)
    check(bad.returncode != 0 and "cannot open" in bad.stderr, "a missing checkpoint is an error")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
