"""The machine: GPU and link datasheets (presets), the attention kernel and GEMM models, the
topology of nodes, NICs and PCIe fabrics, what runs beside a kernel slows it (contention),
the datasheet model of GPUs, links and nodes (cluster), a calibrated profile that stands in
for it (profile), and the interface both offer the engine (model).
"""
