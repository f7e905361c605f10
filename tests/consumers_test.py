"""An installed sar builds and runs MPI programs through each of its three doors, and
programs linked with its compiled models through two (usage: consumers_test.py SOURCE_ROOT
MPIRUN).

1. `meson install --destdir STAGE` of the headers and the compiled models (built without
   optimisation: this checks the doors, not speed).
2. pkg-config: examples/consumers/pkg-config/build.sh with PKG_CONFIG_PATH in STAGE; and
   build-models.sh with sar-models and with sar-models-distributed.
3. CMake: find_package(sar CONFIG) with CMAKE_PREFIX_PATH in STAGE, targets sar::sar,
   sar::models and sar::models_distributed.
4. Meson: dependency('sar') through subprojects/sar.wrap, a wrap-git of the repository's
   committed HEAD (so this step checks what was committed, not the working tree); outside a
   git checkout, subprojects/sar is a link to the source instead.
Each sar consumer runs on 2 ranks and must print "consumer: ok on 2 ranks"; each models
consumer must print "models consumer: ok", and its object file must define no instance of
make_model, load_model or train_full_batch (the library's, declared extern by its flags).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

source, mpirun = os.path.abspath(sys.argv[1]), sys.argv[2]
consumers = os.path.join(source, "examples", "consumers")


def run(*command, env=None, cwd=None):
    print("$", " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    if result.returncode != 0:
        sys.exit(f"FAILED ({result.returncode}): {' '.join(command)}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def check_runs(binary, name):
    out = run(mpirun, "-np", "2", "--oversubscribe", binary)
    if "consumer: ok on 2 ranks" not in out:
        sys.exit(f"FAILED: the {name} consumer printed\n{out}")
    print(f"{name}: ok", flush=True)


def check_models(binary, objects, name):
    """The models consumer ran, and none of its objects compiled the library's instances."""
    out = run(binary)
    if "models consumer: ok" not in out:
        sys.exit(f"FAILED: the {name} models consumer printed\n{out}")
    if not objects:
        sys.exit(f"FAILED: no object file of the {name} models consumer")
    for obj in objects:
        defined = run("nm", "-C", "--defined-only", obj)
        compiled = [line for line in defined.splitlines()
                    if re.search(r"\b(make_model|load_model|train_full_batch)<", line)]
        if compiled:
            sys.exit(f"FAILED: {obj} compiled instances the library holds:\n" +
                     "\n".join(compiled[:5]))
    print(f"{name} models: ok (no instance compiled)", flush=True)


with tempfile.TemporaryDirectory(prefix="sar-consumers-") as work:
    stage = os.path.join(work, "stage")
    build = os.path.join(work, "sar-build")
    run("meson", "setup", build, source, "--prefix=/usr/local", "--buildtype=plain",
        "-Dtests=false", "-Dprograms=false", "-Dexamples=false", "-Dbenchmarks=false",
        "-Dmodels=true", "-Dnative=false")
    run("meson", "install", "-C", build, "--destdir", stage)
    prefix = os.path.join(stage, "usr", "local")

    # Copy the consumers so that their builds write nowhere in the repository.
    projects = os.path.join(work, "consumers")
    shutil.copytree(consumers, projects)

    pc = glob.glob(os.path.join(prefix, "**", "sar.pc"), recursive=True)
    if len(pc) != 1:
        sys.exit(f"FAILED: expected one installed sar.pc, found {pc}")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pc[0]))
    binary = os.path.join(work, "consumer-pkg-config")
    run("bash", os.path.join(projects, "pkg-config", "build.sh"), binary, env=env)
    check_runs(binary, "pkg-config")
    for package in ["sar-models", "sar-models-distributed"]:
        binary = os.path.join(work, f"consumer-{package}")
        run("bash", os.path.join(projects, "pkg-config", "build-models.sh"), package, binary,
            env=env)
        check_models(binary, [binary + ".o"], f"pkg-config {package}")

    cmake_build = os.path.join(work, "cmake-build")  # Ninja: Meson's, make may be absent
    run("cmake", "-G", "Ninja", "-S", os.path.join(projects, "cmake"), "-B", cmake_build,
        f"-DCMAKE_PREFIX_PATH={prefix}")
    run("cmake", "--build", cmake_build)
    check_runs(os.path.join(cmake_build, "consumer"), "cmake")
    for target in ["models_consumer", "models_distributed_consumer"]:
        objects = glob.glob(os.path.join(cmake_build, "**", f"{target}.dir", "**", "*.o"),
                            recursive=True)
        check_models(os.path.join(cmake_build, target), objects, f"cmake {target}")

    meson_project = os.path.join(projects, "meson")
    subprojects = os.path.join(meson_project, "subprojects")
    os.makedirs(subprojects)
    if os.path.exists(os.path.join(source, ".git")):
        with open(os.path.join(subprojects, "sar.wrap"), "w") as wrap:
            wrap.write(f"[wrap-git]\nurl = {source}\nrevision = HEAD\n\n"
                       "[provide]\ndependency_names = sar\n")
    else:
        os.symlink(source, os.path.join(subprojects, "sar"))
    meson_build = os.path.join(work, "meson-build")
    run("meson", "setup", meson_build, meson_project, "--force-fallback-for=sar")
    run("ninja", "-C", meson_build)
    check_runs(os.path.join(meson_build, "consumer"), "meson")
