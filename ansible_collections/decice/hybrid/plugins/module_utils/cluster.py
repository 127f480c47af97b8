"""Reading a cluster through kubernetes.core's dynamic client: the read side the add-on
engine's modules share (``decice.hybrid.addon_receipt``, ``decice.hybrid.addon_wait``).

A kind the server does not serve reads as nothing (its CRD may be gone, or not there yet);
every other API error is raised as the dynamic client's ``DynamicApiError``.
"""

from __future__ import annotations

from typing import Any

try:
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError
    from urllib3.exceptions import HTTPError
except ImportError:  # AnsibleK8SModule reports the missing kubernetes library
    DynamicApiError = ResourceNotFoundError = HTTPError = Exception  # type: ignore[assignment,misc]

#: what a read of a cluster that is busy or restarting raises: worth another try
TRANSIENT: tuple[type[BaseException], ...] = (DynamicApiError, HTTPError, OSError)


def describe(exc: BaseException) -> str:
    """An API error as its status and reason; anything else as its type and text."""
    if isinstance(exc, DynamicApiError):
        return f"{getattr(exc, 'status', '?')} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


REQUEST_TIMEOUT = 30

Obj = dict[str, Any]


class Reader:
    """LIST and GET over a ``kubernetes.dynamic.DynamicClient``."""

    def __init__(self, dynamic: Any, request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._dynamic = dynamic
        self._timeout = request_timeout

    def _resource(self, api_version: str, kind: str) -> Any:
        try:
            return self._dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        """The objects of ``kind`` (all namespaces when ``namespace`` is None)."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return []
        found = self._dynamic.get(
            resource,
            namespace=namespace,
            label_selector=label_selector or None,
            _request_timeout=self._timeout,
        )
        items = list(found.to_dict().get("items") or [])
        for item in items:  # a list's items carry no kind of their own
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        return items

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """The object, or None when it is not there."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return None
        try:
            found = self._dynamic.get(
                resource, name=name, namespace=namespace, _request_timeout=self._timeout
            )
        except DynamicApiError as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise
        return dict(found.to_dict())
