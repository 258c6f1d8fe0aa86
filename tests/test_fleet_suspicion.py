"""Fleet suspicion (console/diagnosis/fleet.py), the Hostname -> SSH mapping, fleet targets."""
import pytest

from console.diagnosis.fleet import HELD_FLOOR_MIB, assess, fleet_findings, window_words
from console.model import FleetGpu, FleetNode, FleetSnapshot
from console.sources.fleet_hosts import check_domain, nodes_index, ssh_destination
from console.sources.prometheus.endpoint import parse_endpoint
from console.sources.prometheus.source import TOKEN_ENV, read_token
from console.sources.targets import expand_targets, is_fleet_target, make_source

GIB = 1024


def node(name, *gpus):
    return FleetNode(hostname=name, gpus=tuple(gpus))


def busy(i):
    return FleetGpu(index=i, memory_used_mib=80 * GIB, memory_total_mib=97 * GIB, utilization_pct=97)


def held(i, gib=71.2):
    return FleetGpu(index=i, memory_used_mib=gib * GIB, memory_total_mib=97 * GIB, utilization_pct=0,
                    idle_held_mib=gib * GIB)


def snap(*nodes, window_s=600):
    return FleetSnapshot(source="prometheus://p:9090", taken_at=0, nodes=nodes, window_s=window_s)


def test_memory_held_at_zero_says_which_gpu_how_much_how_long():
    (n,) = assess(snap(node("gpu07", busy(0), held(3)))).nodes
    assert n.suspicion == "GPU 3: 71.2 GiB held at 0% for 10 min" and n.suspicion_rank == 2


def test_gpus_with_the_same_words_share_them():
    (n,) = assess(snap(node("gpu07", *(held(i, 86.0) for i in range(4))), window_s=5)).nodes
    assert n.suspicion == "GPUs 0-3: 86.0 GiB each at 0% for 5 s"


def test_idle_memory_under_the_floor_is_not_suspect():
    idle = FleetGpu(index=0, memory_used_mib=4, utilization_pct=0, idle_held_mib=HELD_FLOOR_MIB)
    (n,) = assess(snap(node("gpu01", idle))).nodes
    assert n.suspicion is None and n.suspicion_rank == 0 and fleet_findings(n, 600) == []


def test_an_xid_is_named_from_the_catalogue_and_ranks_by_its_severity():
    severe = FleetGpu(index=1, last_xid=79)
    mild = FleetGpu(index=0, last_xid=43)
    nodes = assess(snap(node("a-mild", mild), node("b-held", held(2)), node("c-severe", severe),
                        node("d-fine", busy(0)))).nodes
    assert [n.hostname for n in nodes] == ["c-severe", "b-held", "a-mild", "d-fine"]
    assert "Xid 79 (" in nodes[0].suspicion and nodes[0].suspicion.startswith("GPU 1: ")


def test_suspects_first_then_by_hostname():
    nodes = assess(snap(node("z", busy(0)), node("m", held(0)), node("a", busy(0)), node("b", held(1)))).nodes
    assert [n.hostname for n in nodes] == ["b", "m", "a", "z"]


def test_findings_for_fail_on():
    n = assess(snap(node("gpu07", held(3), FleetGpu(index=5, last_xid=48)))).nodes[0]
    kinds = {f.kind: f for f in fleet_findings(n, 600)}
    assert kinds["idle-memory"].severity == "high" and kinds["idle-memory"].gpus == (3,)
    assert kinds["xid"].severity == "critical" and "Xid 48" in kinds["xid"].summary


@pytest.mark.parametrize("s, words", [(5, "5 s"), (600, "10 min"), (5400, "90 min"), (9000, "2.5 h"), (None, "the window")])
def test_window_words(s, words):
    assert window_words(s) == words


def test_hostname_to_ssh_destination():
    index = nodes_index(["root@gpu01.example.org:2222", "admin@gpu02", "gpu[03-04]"])
    assert ssh_destination("gpu01", nodes=index) == "root@gpu01.example.org:2222"
    assert ssh_destination("gpu02", nodes=index, domain="example.org") == "admin@gpu02"
    assert ssh_destination("gpu05", nodes=index, domain=".example.org") == "gpu05.example.org"
    assert ssh_destination("gpu05.sub.example.org", domain="example.org") == "gpu05.sub.example.org"
    assert ssh_destination("simnode01") == "simnode01"           # an ssh_config alias


@pytest.mark.parametrize("hostname", ["gpu07.attacker.example", "127.0.0.1", "gpu01.example.org.evil.net"])
def test_with_a_domain_a_dotted_hostname_outside_it_gets_no_destination(hostname):
    with pytest.raises(ValueError, match="outside --ssh-domain example.org"):
        ssh_destination(hostname, domain="example.org")


def test_a_hostname_with_a_trailing_newline_is_no_host_name():
    index = nodes_index(["root@gpu01.example.org:2222"])
    with pytest.raises(ValueError, match="not a plain host name"):
        ssh_destination("gpu01\n", nodes=index)


@pytest.mark.parametrize("hostname", ["local", "demo"])
def test_a_hostname_local_or_demo_is_an_ssh_host_never_this_machine(hostname):
    from console.sources.ssh.source import SshSource
    from console.sources.targets import ssh_source
    src = ssh_source(ssh_destination(hostname))
    assert isinstance(src, SshSource) and src.name == hostname


@pytest.mark.parametrize("hostname", ["-oProxyCommand=touch x", "a b", "gpu01;reboot", "", "$(id)", "a\nb",
                                      ".hidden", "a..b", "x" * 300])
def test_a_hostname_that_is_no_host_name_gets_no_destination(hostname):
    with pytest.raises(ValueError):
        ssh_destination(hostname, domain="example.org")


def test_bad_domain():
    with pytest.raises(ValueError, match="--ssh-domain"):
        check_domain("exa mple")


def test_fleet_targets():
    assert is_fleet_target("prometheus://p:9090") and is_fleet_target("prometheus+https://p")
    assert not is_fleet_target("gpu01") and not is_fleet_target("demo")
    assert expand_targets(["gpu[01-02]", "prometheus://p:9090"]) == ["gpu01", "gpu02", "prometheus://p:9090"]
    with pytest.raises(ValueError, match="fleet source"):
        make_source("prometheus://p:9090")


@pytest.mark.parametrize("target, url", [
    ("prometheus://p", "http://p:9090"), ("prometheus://p:19090", "http://p:19090"),
    ("prometheus+https://prom.example.org:443/prom/", "https://prom.example.org:443/prom"),
    ("prometheus://[::1]:9090", "http://[::1]:9090"),
])
def test_endpoint(target, url):
    assert parse_endpoint(target).base_url == url


@pytest.mark.parametrize("target", ["prometheus://", "prometheus://u:pw@p:9090", "prometheus://p:99999",
                                    "prometheus://p:0", "prometheus://p:x", "prometheus://p:9090/?q=1",
                                    "prometheus://p q", "prometheus://p\n:9090", "prom://p", "prometheus://p#f"])
def test_bad_endpoints_are_one_line(target):
    with pytest.raises(ValueError) as exc:
        parse_endpoint(target)
    assert "\n" not in str(exc.value).replace(repr(target), "")


def test_token_from_file_or_environment(tmp_path):
    f = tmp_path / "token"
    f.write_text("  s3cret-token\n")
    assert read_token(str(f), {}) == "s3cret-token"
    assert read_token(None, {TOKEN_ENV: "from-env"}) == "from-env"
    assert read_token(None, {}) is None
    f.write_text("two\nlines")
    with pytest.raises(ValueError, match="one token"):
        read_token(str(f), {})
    with pytest.raises(ValueError, match="cannot read"):
        read_token(str(tmp_path / "missing"), {})


@pytest.mark.parametrize("hostname", ["local", "demo"])
def test_the_console_opens_a_fleet_node_named_local_or_demo_over_ssh(hostname):
    """What enter on a fleet row opens (cli.make_fleet's node_source): SSH, never LocalSource
    (root on the console's own host) or the simulator."""
    from console import cli
    from console.sources.ssh.source import SshSource
    args = cli.build_console_parser().parse_args(["prometheus://127.0.0.1:9"])
    setup = cli.make_fleet(args, "prometheus://127.0.0.1:9")
    src = setup.node_source(hostname)
    assert type(src) is SshSource and src.name == hostname
