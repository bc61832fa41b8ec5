"""Choice tuples that several layers read, declared once and importable without torch (`--help` loads
none): the kernels (`kernels.plan`) and the flags that name them (`runs.configs`)."""

BACKENDS = ("reference", "torch_chunked", "native", "triton")  # the kernels of the row statistics
FUSED_MODES = ("auto", "on", "off")  # --fused: time both routes, the one pass, sdpa + a statistics pass
