# gpufleet service image: `docker build -t gpufleet .`
# Non-root (uid 10001), nothing written to the image at run time (bytecode compiled at build),
# so it runs with readOnlyRootFilesystem: true; only /tmp needs to be writable (an emptyDir in
# deploy/base). Dev tools, tests and the simulator's fixtures are not installed.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY errors ./errors
COPY observer ./observer
COPY detectors ./detectors
COPY remediations ./remediations
COPY evaluation ./evaluation
COPY simulator ./simulator
COPY alerts ./alerts
COPY dashboards ./dashboards
COPY metering ./metering
COPY gpufleet ./gpufleet
RUN python -m venv /opt/gpufleet \
 && /opt/gpufleet/bin/pip install . \
 && /opt/gpufleet/bin/python -m compileall -q /opt/gpufleet

FROM python:3.11-slim-bookworm
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
