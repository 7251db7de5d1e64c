# gpufleet service image: `make image` (buildah, over a Debian base made by mmdebstrap), or
# `docker build -t gpufleet .` / `buildah bud -t gpufleet .` over the default public Python base.
# BASE: any Debian-like image with python3 (3.11+) and its venv module; both stages use it.
# Non-root (uid 10001), nothing written to the image at run time (bytecode compiled at build),
# so it runs with readOnlyRootFilesystem: true; only /tmp needs to be writable (an emptyDir in
# deploy/base). Dev tools, tests and the simulator's fixtures are not installed.

ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
# PIP_CERT: a CA bundle for pip where HTTPS goes through a proxy with its own CA (`make image`
# mounts the host's bundle for the build only; nothing of it stays in the image). Unset: pip's own.
ARG PIP_CERT
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
# The dependencies first, in their own layer: a code change does not reinstall them. Each at the
# version constraints.txt pins, the one the tests ran with (not whatever PyPI has newest today).
RUN python3 -m venv /opt/gpufleet \
 && /opt/gpufleet/bin/python3 -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb')); \
open('/tmp/deps.txt', 'w').write(chr(10).join(d['project']['dependencies']))" \
 && /opt/gpufleet/bin/pip install -c constraints.txt -r /tmp/deps.txt
COPY errors ./errors
COPY observer ./observer
COPY detectors ./detectors
COPY remediations ./remediations
COPY database ./database
COPY kube ./kube
COPY backtesting ./backtesting
COPY lab ./lab
COPY simulator ./simulator
COPY alerts ./alerts
COPY dashboards ./dashboards
COPY metering ./metering
COPY gpufleet ./gpufleet
RUN /opt/gpufleet/bin/pip install --no-deps . \
 && /opt/gpufleet/bin/python3 -m compileall -q /opt/gpufleet

FROM ${BASE}
ENV PATH=/opt/gpufleet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
RUN groupadd --system --gid 10001 gpufleet \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin gpufleet
COPY --from=build /opt/gpufleet /opt/gpufleet
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["gpufleet"]
CMD ["run", "--config", "/etc/gpufleet/config.yaml"]
