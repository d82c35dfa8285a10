"""Measuring what the lab runs: collective timing, GPU energy (NVML) and the machine record beside every figure."""
