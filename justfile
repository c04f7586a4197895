# Allot tasks. Everything goes through scripts/dev, which bootstraps .venv on first use.

# list the recipes
default:
    @just --list

# create .venv and install the workspace
setup:
    scripts/dev setup

# the main job: dev stack + demo workload + replay --verify
demo:
    scripts/dev demo

# the whole default test suite
test *ARGS:
    scripts/dev test {{ARGS}}

# long suites: trace simulations, large benchmarks
test-slow *ARGS:
    scripts/dev test-slow {{ARGS}}

# tests that need a Docker engine (compose) or a Kubernetes cluster
test-docker:
    scripts/dev test -m docker
test-kube:
    scripts/dev test -m kube

# the gates: ruff (lint, format), mypy strict, import-linter
check:
    scripts/dev check

# start / inspect / stop the dev stack in ./.allot
up:
    .venv/bin/allot up
status:
    .venv/bin/allot status
down:
    .venv/bin/allot down

# prove every decision in the log of the running stack
verify:
    .venv/bin/allot replay --verify

# benchmarks (each prints one JSON object)
bench:
    .venv/bin/allot bench e2e --json
    .venv/bin/allot bench append --json
    .venv/bin/allot bench placement --json
    .venv/bin/allot bench quota --json
    .venv/bin/allot bench gang --json

# regenerate the committed JSON Schemas after a contract change
schemas:
    .venv/bin/allot schema --out libs/contracts/schemas

# run the stack in containers (needs a Docker engine)
compose-up:
    docker compose up
