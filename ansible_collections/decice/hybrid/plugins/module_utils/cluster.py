"""A cluster through kubernetes.core's dynamic client, as the add-on engine's modules use it
(``decice.hybrid.addon_receipt``, ``addon_wait``, ``addon_remove``, ``addon_install``):
lists, reads, creates, deletes, finalizers stripped, and a poll that waits for what is still
pending; and :class:`Applier`, the server-side apply of ``decice.hybrid.manifest_apply``
and of the CRDs ``addon_install`` adapts for the sim.

A kind the server does not serve reads as nothing (its CRD may be gone, or not there yet);
every other API error is raised as the dynamic client's ``DynamicApiError``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import manifests
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
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
#: an apply of megabytes of CRDs to a busy 1.20 server takes longer than a read
APPLY_TIMEOUT = 60

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
            serialize=False,
        )
        items = list(decoded(found).get("items") or [])
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
                resource, name=name, namespace=namespace, _request_timeout=self._timeout,
                serialize=False, **kwargs,
            )  # fmt: skip
        except DynamicApiError as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """The object, or None when it is not there."""
        found = self._named("get", api_version, kind, name, namespace)
        return None if found is None else decoded(found)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Send a delete (background propagation); False when the object is not there."""
        body = {"propagationPolicy": "Background"}
        return self._named("delete", api_version, kind, name, namespace, body=body) is not None

    def create(self, api_version: str, kind: str, body: Obj, namespace: str | None = None) -> Obj:
        """Create ``body``; the object as the server stored it."""
        resource = self._dynamic.resources.get(api_version=api_version, kind=kind)
        found = self._dynamic.create(
            resource, body=body, namespace=namespace, _request_timeout=self._timeout,
            serialize=False,
        )  # fmt: skip
        return decoded(found)

    def merge_patch(
        self, api_version: str, kind: str, name: str, body: Obj, namespace: str | None = None
    ) -> bool:
        """A JSON merge patch of the object; False when it is not there."""
        patched = self._named("patch", api_version, kind, name, namespace, body=body,
                              content_type="application/merge-patch+json")  # fmt: skip
        return patched is not None

    def applier(self, field_manager: str) -> Applier:
        """Server-side apply over the same client, as ``field_manager``."""
        return Applier(self._dynamic, field_manager)

    def strip_finalizers(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> bool:
        """Merge-patch ``metadata.finalizers: []``; False when the object is not there."""
        body: Obj = {"metadata": {"finalizers": []}}
        return self.merge_patch(api_version, kind, name, body, namespace)


def decoded(response: Any) -> Obj:
    """The JSON body of a response the dynamic client left raw (``serialize=False``): its
    ``ResourceInstance`` would wrap every field of every object in an object of its own,
    only for ``to_dict()`` to undo it (a list of Sedna's CRDs: about 0.2 s against 0.03 s
    parsed as JSON, ``bench/addons/decode.py``)."""
    data = response.data
    return dict(json.loads(data)) if data else {}


def api_message(exc: Any) -> str:
    """The API server's own message of a failed request, else its reason."""
    try:
        body = json.loads(exc.body)
    except (TypeError, ValueError, AttributeError):
        body = None
    if isinstance(body, Mapping) and body.get("message"):
        return str(body["message"])
    return str(getattr(exc, "reason", "") or exc)


class Applier:
    """:class:`manifests.Cluster` (server-side apply, get, list, delete) over a
    ``kubernetes.dynamic.DynamicClient``; ``field_manager`` owns what it applies."""

    def __init__(self, dynamic: Any, field_manager: str) -> None:
        self._dynamic = dynamic
        self._field_manager = field_manager

    def _resource(self, api_version: str, kind: str) -> Any:
        resource = served(self._dynamic, api_version, kind)
        if resource is None:
            raise manifests.Refused(f"the server has no kind {kind} in {api_version}")
        return resource

    def namespaced(self, api_version: str, kind: str) -> bool:
        return bool(self._resource(api_version, kind).namespaced)

    def _where(self, ident: manifests.Ident) -> tuple[Any, str | None]:
        resource = self._resource(ident[0], ident[1])
        return resource, (ident[2] or "default") if resource.namespaced else None

    def _named(self, verb: str, ident: manifests.Ident, **kwargs: Any) -> Any:
        """``verb`` (get, delete) on the object ``ident``; Missing when it or its kind is not
        there."""
        try:
            resource, namespace = self._where(ident)
            return getattr(self._dynamic, verb)(
                resource,
                name=ident[3],
                namespace=namespace,
                _request_timeout=APPLY_TIMEOUT,
                serialize=False,
                **kwargs,
            )
        except manifests.Refused:
            raise manifests.Missing(manifests.describe(ident)) from None
        except DynamicApiError as exc:
            if exc.status == 404:
                raise manifests.Missing(manifests.describe(ident)) from None
            raise

    def get(self, ident: manifests.Ident) -> manifests.Obj:
        return decoded(self._named("get", ident))

    def list(self, api_version: str, kind: str) -> dict[tuple[str, str], manifests.Obj]:
        resource = self._resource(api_version, kind)
        try:
            found = self._dynamic.get(resource, _request_timeout=APPLY_TIMEOUT, serialize=False)
        except DynamicApiError as exc:
            raise manifests.Refused(api_message(exc)) from None
        items = decoded(found).get("items") or []
        return {
            (str(item["metadata"].get("namespace") or ""), str(item["metadata"]["name"])): item
            for item in items
        }

    def apply(self, ident: manifests.Ident, body: manifests.Obj) -> manifests.Obj:
        resource, namespace = self._where(ident)
        try:
            found = self._dynamic.server_side_apply(
                resource,
                body=body,
                name=ident[3],
                namespace=namespace,
                force_conflicts=True,
                field_manager=self._field_manager,
                _request_timeout=APPLY_TIMEOUT,
                serialize=False,
            )
        except DynamicApiError as exc:
            raise manifests.Refused(api_message(exc)) from None
        return decoded(found)

    def delete(self, ident: manifests.Ident) -> None:
        self._named("delete", ident, propagation_policy="Background")

    def refresh(self) -> None:
        self._dynamic.resources.invalidate_cache()


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


def wait(module: Any, check: Check, what: str, start: float, out: dict[str, Any]) -> None:
    """Run ``check`` until nothing is pending or the module's ``timeout`` passes (a look
    every ``interval``); what was pending at the first look goes to ``out["waited_for"]``
    and the seconds since ``start`` to ``out["seconds"]``. When time runs out, fail naming
    ``what`` it is (not ready, not gone): the first 20 still pending, and the last read's
    error if it failed."""
    params = module.params
    first, left, error = poll(check, params["timeout"], params["interval"])
    out["waited_for"], out["seconds"] = first, round(time.monotonic() - start, 2)
    if left:
        more = f"; and {len(left) - 20} more" if len(left) > 20 else ""
        detail = "; ".join(left[:20]) + more
        if error:
            detail += f"; reading the cluster: {error}"
        module.fail_json(
            msg=f"{params['name']}: {what} after {params['timeout']} s: {detail}", **out
        )


def argument_spec(**options: dict[str, Any]) -> dict[str, Any]:
    """A module's argument spec: kubernetes.core's connection options (kubeconfig, context,
    host, ...) and the module's own ``options``."""
    return {**copy.deepcopy(AUTH_ARG_SPEC), **options}


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
