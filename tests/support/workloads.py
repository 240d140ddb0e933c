"""A tiny workload file (the YAML format of ``shared/workloads``) for command tests."""

TINY_WORKLOAD = """\
model: tiny
default: {dtype: fp32, seed: 1, rtol: 1.0e-4, atol: 1.0e-4}
cases:
  - name: add_basic
    op: torch.add
    inputs:
      - tensor: {shape: [4, 64], init: rand}
      - tensor: {shape: [4, 64], init: rand}
"""
