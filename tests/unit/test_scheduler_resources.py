import pytest

from decice_kube.quantity import INT64_MAX
from decice_scheduler.builders import container, make_node, make_pod
from decice_scheduler.cache.resources import (
    Resources,
    fits,
    node_allocatable,
    parse_resource_list,
    pod_request,
)

pytestmark = pytest.mark.unit

MI = 2**20
GPU = "nvidia.com/gpu"


def test_resources_arithmetic_is_immutable_and_drops_zero_extended():
    a = Resources(100, 10, 1, {GPU: 1})
    b = Resources(50, 5, 1, {GPU: 1, "example.com/x": 2})
    total = a.add(b)
    assert total == Resources(150, 15, 2, {GPU: 2, "example.com/x": 2})
    assert a == Resources(100, 10, 1, {GPU: 1})
    back = total.sub(b)
    assert back == a
    assert dict(back.extended) == {GPU: 1}  # example.com/x: 0 dropped
    assert total.get(GPU) == 2 and total.get("missing") == 0


def test_fits_reports_each_missing_resource():
    alloc = parse_resource_list({"cpu": "2", "memory": "1Gi", "pods": "2", GPU: "1"})
    used = Resources(1500, 0, 2, {GPU: 1})
    req = Resources(600, 10, 1, {GPU: 1, "example.com/fpga": 1})
    assert fits(req, alloc, used) == [
        "Too many pods",
        "Insufficient cpu",
        "Insufficient nvidia.com/gpu",
        "Insufficient example.com/fpga",
    ]
    assert fits(Resources(500, 10, 1), alloc, Resources(1500, 0, 1)) == []


def test_node_allocatable_falls_back_to_capacity():
    node = make_node("n", cpu="8", memory="16Gi", extended={GPU: "4"})
    assert node_allocatable(node) == Resources(8000, 16 * 2**30, 110, {GPU: 4})
    del node["status"]["allocatable"]
    assert node_allocatable(node).cpu == 8000


def test_sum_of_app_containers_and_pod_counts_one():
    pod = make_pod(
        "p",
        containers=[
            container("a", {"cpu": "250m", "memory": "64Mi"}),
            container("b", {"cpu": "250m", "memory": "64Mi", GPU: "1"}),
        ],
    )
    assert pod_request(pod) == Resources(500, 128 * MI, 1, {GPU: 1})


def test_limits_only_become_requests_per_resource():
    pod = make_pod(
        "p",
        containers=[container("a", requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "1Gi"})],
    )
    assert pod_request(pod) == Resources(100, 2**30, 1)


def test_no_resources_at_all():
    pod = make_pod("p", containers=[{"name": "c", "image": "x"}])
    assert pod_request(pod) == Resources(0, 0, 1)


def test_largest_init_container_wins_over_smaller_apps():
    pod = make_pod(
        "p",
        containers=[container("app", {"cpu": "100m", "memory": "100Mi"})],
        init_containers=[
            container("init1", {"cpu": "2", "memory": "10Mi"}),
            container("init2", {"cpu": "500m", "memory": "50Mi"}),
        ],
    )
    # per resource: cpu from init1, memory from the app
    assert pod_request(pod) == Resources(2000, 100 * MI, 1)


def sidecar(name: str, requests: dict[str, str]) -> dict:
    """An init container that keeps running (restartPolicy: Always)."""
    return container(name, requests, restart_policy="Always")


@pytest.mark.parametrize(
    ("app", "init_containers", "field", "want"),
    [
        pytest.param(
            {"cpu": "1"},
            [
                container("early-init", {"cpu": "1500m"}),
                sidecar("sidecar", {"cpu": "500m"}),
                container("late-init", {"cpu": "1200m"}),
            ],
            "cpu",
            1700,  # apps + sidecar = 1500; early step = 1500; late step = 1200 + 500 sidecar
            id="sidecars-add-to-apps-and-to-later-init-steps",
        ),
        pytest.param(
            {"cpu": "100m"},
            [container("init", {"cpu": "1"}), sidecar("sidecar", {"cpu": "300m"})],
            "cpu",
            1000,  # init step = 1000 (sidecar not yet running); apps + sidecar = 400
            id="sidecar-started-after-an-init-container-is-not-in-its-step",
        ),
        pytest.param(
            {"memory": "10Mi"},
            [sidecar("s1", {"memory": "100Mi"}), sidecar("s2", {"memory": "100Mi"})],
            "memory",
            210 * MI,
            id="sidecars-accumulate-in-later-sidecar-steps",
        ),
    ],
)
def test_sidecar_init_steps(app, init_containers, field, want):
    pod = make_pod("p", containers=[container("app", app)], init_containers=init_containers)
    assert getattr(pod_request(pod), field) == want


def test_overhead_is_added_after_the_max():
    pod = make_pod(
        "p",
        containers=[container("app", {"cpu": "1", "memory": "1Gi"})],
        init_containers=[container("init", {"cpu": "2"})],
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    assert pod_request(pod) == Resources(2250, 2**30 + 120 * MI, 1)


def test_pod_level_resources_replace_container_sum_for_cpu_and_memory():
    pod = make_pod(
        "p",
        containers=[container("a", {"cpu": "100m", "memory": "10Mi", GPU: "1"})],
        resources={"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}},
    )
    assert pod_request(pod) == Resources(2000, 2**30, 1, {GPU: 1})


def test_junk_quantity_in_a_pod_fits_nowhere_and_is_logged_once(caplog):
    """Raw JSON from outside the API server's validation: the pod asks for more than any
    node has (it stays Pending), nothing raises, and the value is logged once, quoted."""
    pod = make_pod("p", requests={"cpu": "lots\nINJECTED"})
    node = make_node("n", cpu="64", memory="256Gi")
    with caplog.at_level("WARNING", logger="decice_scheduler.resources"):
        request = pod_request(pod)
        pod_request(pod)
    assert request.cpu == INT64_MAX
    assert fits(request, node_allocatable(node), Resources()) == ["Insufficient cpu"]
    warned = [r.getMessage() for r in caplog.records]
    value = repr("lots\nINJECTED")
    assert warned == [f"resource 'cpu'={value} is not a quantity; counted as {INT64_MAX}"]
    assert "\n" not in warned[0]


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"memory": "1e20"}},  # stored as 100e18 by the API server
        {"limits": {"memory": "1e20000000"}},
        {"requests": {"nvidia.com/gpu": "9Ei"}},
        {"requests": ["cpu", "1"]},  # not a ResourceList at all
        {"requests": {"cpu": None}},
    ],
)
def test_hostile_requests_fit_no_node_and_never_raise(resources):
    pod = make_pod("p")
    pod["spec"]["containers"][0]["resources"] = resources
    node = make_node("n", cpu="1000", memory="1Pi", extended={"nvidia.com/gpu": "1000"})
    assert fits(pod_request(pod), node_allocatable(node), Resources()) != []


def test_a_capacity_that_is_not_a_quantity_counts_as_zero():
    assert parse_resource_list({"cpu": "many", "memory": "1Gi"}) == Resources(0, 2**30, 0)
    assert parse_resource_list(["cpu"]) == Resources()  # type: ignore[arg-type]
    # a huge capacity is as large as a count can be
    assert parse_resource_list({"memory": "1e30"}).memory == INT64_MAX


def test_a_negative_init_step_lowers_no_request():
    """Only what an init step needs beyond nothing raises the peak: a negative request in
    an init container (raw JSON the API server would refuse) leaves the pod's request as
    its app containers' (as kube-scheduler's max with zero)."""
    pod = make_pod(
        "neg",
        containers=[container("app", requests={"memory": "64Mi"})],
        init_containers=[container("init", requests={"cpu": "-500m"})],
    )
    request = pod_request(pod)
    assert (request.cpu, request.memory) == (0, 64 * 2**20)
