"""Parses an OpenMetrics exposition on stdin with Prometheus' own parser
(prometheus_client, strict: a malformed line or a missing `# EOF` raises)
and prints its samples as JSON, for tests/e2e/metrics.rs."""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        samples.append(
            {
                "family": family.name,
                "type": family.type,
                "name": sample.name,
                "labels": sample.labels,
                "value": sample.value,
            }
        )
json.dump(samples, sys.stdout)
