"""Decisions do not depend on the process: same commands under different hash seeds give identical records."""

import os
import subprocess
import sys

SCENARIO = """
import hashlib, json, random
from allot_quota.testing import a_node, a_pod, a_quota, an_engine
rng = random.Random(5)
e = an_engine(nodes=[a_node("n1", cpu=40, memory="128Gi", gpu=8)], config={"monitorAllQuotas": True})
parents, leaves = [], []
for i in range(30):
    parent = rng.choice(parents) if parents and rng.random() < 0.7 else None
    name = f"q{i:02d}"
    is_parent = rng.random() < 0.3
    e.apply_quota(a_quota(name, min={"cpu": rng.randint(0, 2)}, max={"cpu": 20, "memory": "64Gi", "nvidia.com/gpu": 4},
                          parent=parent, is_parent=is_parent, force=True, allow_lent=rng.random() < 0.8))
    (parents if is_parent else leaves).append(name)
out = []
for step in range(300):
    pod = a_pod(f"p{step % 40}", quota=rng.choice(leaves), cpu=rng.randint(1, 5), gpu=rng.randint(0, 1),
                priority=rng.randint(0, 3))
    out.append(getattr(e, rng.choice(["add_pending", "assign", "unassign", "remove_pod"]))(pod).to_dict())
    out.append([d.to_dict() for d in e.waiting_admissions(limit=3)])
    out.append([x.to_dict() for x in e.overuse_revoke(step * 30)])
print(e.digest(), hashlib.sha256(json.dumps([out, e.snapshot(), e.tree_view()], sort_keys=True).encode()).hexdigest())
"""


def _run(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_same_records_under_different_hash_seeds():
    first = _run("0")
    assert first.startswith("sha256:")
    assert _run("4242") == first
