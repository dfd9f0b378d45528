"""The GPU sidecar (`slokit exporter gpu`): NVML metrics beside the vLLM container, for the latency-SLO runbooks.

- `library`: the NVML calls slokit makes and how their errors are classified (the only module importing `pynvml`)
- `catalogue`: every exported family, its type, labels and HELP text
- `fields`: which NVML field ids, bit masks and GPM metric ids answer which metric
- `snapshot`: the immutable result of one poll
- `device`: one GPU's state between polls and every per-GPU read
- `poller`: the NVML session, GPU selection, the poll thread and the XID thread
- `collector`: snapshot -> metric families on each scrape (never calls NVML)
- `server`: `/metrics` and `/healthz` over HTTP(S), with the web-config of `slokit.exporters.webconfig`
"""
