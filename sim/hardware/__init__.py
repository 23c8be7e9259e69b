"""The machine: GPU and link datasheets (presets), the attention kernel and GEMM models, the
topology of nodes, NICs and PCIe fabrics, what runs beside a kernel slows it (contention),
and a calibrated profile that stands in for the datasheet numbers.
"""
