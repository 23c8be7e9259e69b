"""Measurements in, a hardware profile out (calibrate, from_traces, gpu_profile), and how
far a simulated run falls from measured ones (validation).
"""
