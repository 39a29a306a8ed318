# aisim as a container: the one-file executable of scripts/build-executable (the same script the tests
# run) on a slim Debian, as a non-root user, serving `aisim serve`.
#
#   docker build -t aisim:latest .
#   docker run --rm -p 8080:8080 aisim:latest                      # the built-in default scenario
#   docker run --rm -p 8000:8000 -v "$PWD/my.yaml:/etc/aisim/scenario.yaml:ro" aisim:latest \
#       --config /etc/aisim/scenario.yaml --host 0.0.0.0
#
# On Kubernetes (deploy/kubernetes) the scenario is a ConfigMap mounted at /etc/aisim and the probes
# ask /health (OpenAI / vLLM personalities) or /v2/health/ready (KServe v2).

FROM python:3.11-slim-bookworm AS build
# binutils: `strip`, which scripts/aisim.spec runs on libpython; the rest comes from PyPI.
RUN apt-get update && apt-get install -y --no-install-recommends binutils && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY aisim ./aisim
COPY scripts ./scripts
RUN scripts/build-executable /out

FROM debian:bookworm-slim
RUN groupadd --gid 10001 aisim && useradd --uid 10001 --gid aisim --no-create-home --shell /usr/sbin/nologin aisim \
    && mkdir -p /etc/aisim
COPY --from=build /out/aisim /usr/local/bin/aisim
USER 10001:10001
EXPOSE 8000 8002 8080 9400
# No HEALTHCHECK: the image has no HTTP client, and Kubernetes' probes ask /health themselves.
ENTRYPOINT ["/usr/local/bin/aisim", "serve"]
CMD ["--host", "0.0.0.0"]
