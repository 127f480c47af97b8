"""A cluster through kubernetes.core's dynamic client, as the add-on engine's modules use it
(``decice.hybrid.addon_receipt``, ``addon_wait``, ``addon_remove``): lists, reads,
deletes, finalizers stripped, and a poll that waits for what is still pending.

A kind the server does not serve reads as nothing (its CRD may be gone, or not there yet);
every other API error is raised as the dynamic client's ``DynamicApiError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

try:
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError
    from urllib3.exceptions import HTTPError
except ImportError:  # AnsibleK8SModule reports the missing kubernetes library

    class DynamicApiError(Exception):  # type: ignore[no-redef]
        """Stands in for the missing library's error (never raised)."""

    class ResourceNotFoundError(Exception):  # type: ignore[no-redef]
        """Stands in for the missing library's error (never raised)."""

    class HTTPError(Exception):  # type: ignore[no-redef]
        """Stands in for the missing library's error (never raised)."""


#: what a read of a cluster that is busy or restarting raises: worth another try (pylint does
#: not see that this tuple holds exception types: its two except clauses say so)
TRANSIENT = (DynamicApiError, HTTPError, OSError)


def describe(exc: BaseException) -> str:
    """An API error as its status and reason; anything else as its type and text."""
    if isinstance(exc, DynamicApiError):
        return f"{getattr(exc, 'status', '?')} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


REQUEST_TIMEOUT = 30

Obj = dict[str, Any]

#: one look at what is still pending: each entry names an object and why
Check = Callable[[], list[str]]


def served(dynamic: Any, api_version: str, kind: str) -> Any:
    """The resource of ``kind`` in ``api_version`` on ``dynamic`` (a
    ``kubernetes.dynamic.DynamicClient``), or None when the server does not serve it."""
    try:
        return dynamic.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        return None


class Client:
    """LIST, GET, DELETE and finalizer removal over a ``kubernetes.dynamic.DynamicClient``."""

    def __init__(self, dynamic: Any, request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._dynamic = dynamic
        self._timeout = request_timeout

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        """The objects of ``kind`` (all namespaces when ``namespace`` is None)."""
        resource = served(self._dynamic, api_version, kind)
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

    def _named(self, verb: str, api_version: str, kind: str, name: str,
               namespace: str | None, **kwargs: Any) -> Any:  # fmt: skip
        """``verb`` (get, delete, patch) on one object; None when it or its kind is not there."""
        resource = served(self._dynamic, api_version, kind)
        if resource is None:
            return None
        try:
            return getattr(self._dynamic, verb)(
                resource, name=name, namespace=namespace, _request_timeout=self._timeout, **kwargs
            )
        except DynamicApiError as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """The object, or None when it is not there."""
        found = self._named("get", api_version, kind, name, namespace)
        return None if found is None else dict(found.to_dict())

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Send a delete (background propagation); False when the object is not there."""
        body = {"propagationPolicy": "Background"}
        return self._named("delete", api_version, kind, name, namespace, body=body) is not None

    def strip_finalizers(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        """Merge-patch ``metadata.finalizers: []``; False when the object is not there."""
        patched = self._named("patch", api_version, kind, name, namespace,
                              body={"metadata": {"finalizers": []}},
                              content_type="application/merge-patch+json")  # fmt: skip
        return patched is not None


def poll(
    check: Check,
    timeout: float,
    interval: float = 1.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> tuple[list[str], list[str], str]:
    """Run ``check`` until it finds nothing pending or ``timeout`` passes.

    Returns (what was pending at the first look, what is pending at the end, the last
    error if the last look failed). A read that fails the way a busy or restarting
    server does (:data:`TRANSIENT`) counts as "not known yet" until the deadline."""
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline = clock() + timeout
    first: list[str] | None = None
    while True:
        error = ""
        try:
            pending = check()
        except TRANSIENT as exc:  # pylint: disable=catching-non-exception
            pending, error = ["(the last read failed)"], describe(exc)
        if first is None:
            first = pending
        if not pending or clock() + interval > deadline:
            return first, pending, error
        sleep(interval)


def run_module(argument_spec: dict[str, Any], run: Callable[[Any], dict[str, Any]]) -> None:
    """The entry point of a kubernetes.core module (check mode supported): ``run(module)``'s
    result."""
    module = AnsibleK8SModule(argument_spec=argument_spec, supports_check_mode=True)
    module.exit_json(**run(module))


def main(argument_spec: dict[str, Any], run: Callable[[Any, Client], dict[str, Any]]) -> None:
    """The entry point of a module over :class:`Client`: ``run(module, client)``'s result,
    or a failure naming the module's ``name`` parameter and what went wrong."""
    module = AnsibleK8SModule(argument_spec=argument_spec, supports_check_mode=True)
    name = module.params["name"]
    try:
        client = Client(get_api_client(module=module).client)
    except Exception as exc:  # kubeconfig missing or wrong, server unreachable at discovery
        module.fail_json(msg=f"{name}: cannot make a Kubernetes client: {exc}")
    try:
        result = run(module, client)
    except TRANSIENT as exc:  # pylint: disable=catching-non-exception
        module.fail_json(msg=f"{name}: talking to the cluster: {describe(exc)}")
    module.exit_json(**result)
