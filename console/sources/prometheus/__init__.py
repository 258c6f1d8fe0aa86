"""The fleet source: dcgm-exporter metrics through Prometheus's HTTP API (``prometheus://``)."""
from console.sources.prometheus.source import PrometheusSource

__all__ = ["PrometheusSource"]
