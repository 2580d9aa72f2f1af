"""The Prometheus sink's labels: a series' labels from its resource and point attributes.

Every series is labelled with its resource's ``job``/``instance``/``experiment``/``trial``/
``role`` plus its point attributes; the other resource attributes go to ``target_info``.
Attribute names the sink uses itself get the ``exported_`` prefix.
"""

from __future__ import annotations

from exporters.prometheus.naming import label_name, labels_from_attributes
from telemetry.model import names
from telemetry.model.snapshot import Attributes

Labels = tuple[tuple[str, str], ...]

OVERFLOW_LABEL = ("otel_metric_overflow", "true")
RESOURCE_LABELS = {names.EXPERIMENT: "experiment", names.TRIAL: "trial", names.ROLE: "role"}
RESERVED_LABELS = frozenset({"job", "instance", *RESOURCE_LABELS.values(), "le", OVERFLOW_LABEL[0]})
_JOB_INSTANCE = {"service.name", "service.namespace", "service.instance.id"}


def resource_labels(resource: Attributes) -> tuple[Labels, Labels]:
    """The labels of every series of ``resource`` and those of its ``target_info`` entry."""
    attrs = dict(resource)
    job = str(attrs.get("service.name", "unknown_service"))
    if "service.namespace" in attrs:
        job = f"{attrs['service.namespace']}/{job}"
    base = (("job", job), ("instance", instance(attrs)))
    base += tuple(
        (label, str(attrs[name])) for name, label in RESOURCE_LABELS.items() if name in attrs
    )
    extra = labels_from_attributes(
        (k, v)
        for k, v in resource
        if k not in _JOB_INSTANCE and label_name(k) not in {"job", "instance"}
    )
    return base, base[:2] + tuple(sorted(extra.items()))


def point_labels(attributes: Attributes) -> Labels:
    """Attribute labels; names taken by the sink get the ``exported_`` prefix."""
    if not attributes:
        return ()
    return tuple(
        (f"exported_{name}" if name in RESERVED_LABELS else name, value)
        for name, value in labels_from_attributes(attributes).items()
    )


def instance(attrs: dict) -> str:
    """``service.instance.id``, else ``<host>:<role><worker id>`` for a rollout or eval worker
    (``vm:rollout0``, ``vm:eval0``) and ``<host>:rank<rank>`` for a trainer rank (``vm:rank0``):
    workers of two roles with the same id stay two instances."""
    if "service.instance.id" in attrs:
        return str(attrs["service.instance.id"])
    host = str(attrs.get("host.name", "unknown"))
    if names.WORKER_ID in attrs:
        return f"{host}:{attrs.get(names.ROLE, 'worker')}{attrs[names.WORKER_ID]}"
    if names.RANK in attrs:
        return f"{host}:rank{attrs[names.RANK]}"
    return host
