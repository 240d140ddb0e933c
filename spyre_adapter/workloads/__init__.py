"""Real-model operator workloads (the YAML format of ``shared/workloads``):
load, build every case, run it compiled on the spyre device, compare with CPU
eager, classify, and report (``spyre-adapter workloads FILE.yaml...``).

``differential`` holds the check shared with the OpInfo sweep.
"""
